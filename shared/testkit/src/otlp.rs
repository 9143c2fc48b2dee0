//! An in-process OTLP/gRPC trace receiver: the collector end of a test that
//! checks which spans the services export and how they link.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// One exported span.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The exporting service (resource `service.name`).
    pub service: String,
    /// The span's name.
    pub name: String,
    /// Trace id, hex.
    pub trace_id: String,
    /// Span id, hex.
    pub span_id: String,
    /// Parent span id, hex; empty for a root.
    pub parent_span_id: String,
    /// String and integer attributes, as text.
    pub attributes: Vec<(String, String)>,
}

impl ReceivedSpan {
    /// An attribute's value, if set.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<ReceivedSpan>>>);

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut out = self.0.lock().expect("sink lock");
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                .map(|a| text(&a.value))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.push(ReceivedSpan {
                        service: service.clone(),
                        name: s.name,
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent_span_id: hex(&s.parent_span_id),
                        attributes: s.attributes.iter().map(|a| (a.key.clone(), text(&a.value))).collect(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// A running receiver on loopback.
pub struct OtlpReceiver {
    /// The endpoint to give the services (`http://127.0.0.1:<port>`).
    pub endpoint: String,
    sink: Sink,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    /// Binds a free port and serves (on the current runtime).
    pub async fn start() -> anyhow::Result<OtlpReceiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let sink = Sink::default();
        let svc = TraceServiceServer::new(sink.clone());
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder().add_service(svc).serve_with_incoming(incoming).await;
        });
        Ok(OtlpReceiver { endpoint, sink, task })
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.sink.0.lock().expect("sink lock").clone()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
