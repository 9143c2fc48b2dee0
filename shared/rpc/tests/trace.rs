//! W3C trace context crosses the hop: the server's request span is a child of
//! the caller's span, in the same trace.

mod common;

use std::sync::Arc;

use common::*;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use quire_proto::v1::PingRequest;
use quire_proto::Role;
use quire_rpc::server::ControlOnly;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_span_is_a_child_of_the_callers_span() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // Global: the server's tasks run on other runtime threads.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let pki = Pki::new();
    let server = serve(&pki.creds(Role::Bookie, "1"), Arc::new(ControlOnly));
    let addr = server.local_addr().to_string();
    let c = client(&pki.creds(Role::Gateway, "1"));
    let peer = c.peer(&addr, Role::Bookie, None);

    let span = tracing::info_span!("client.operation");
    let (trace_id, span_id) = {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        (sc.trace_id(), sc.span_id())
    };
    let resp = peer.call(PingRequest::default()).instrument(span).await.unwrap();
    assert_eq!(resp.trace_id, trace_id.to_string(), "server saw another trace id");

    server.shutdown(std::time::Duration::from_secs(1)).await;
    let _ = provider.force_flush();
    let spans = exporter.get_finished_spans().unwrap();
    let server_span = spans
        .iter()
        .find(|s| s.name == "rpc.server")
        .unwrap_or_else(|| panic!("no rpc.server span among {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>()));
    assert_eq!(server_span.span_context.trace_id(), trace_id);
    assert_eq!(server_span.parent_span_id, span_id);
}
