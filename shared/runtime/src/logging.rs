//! The tracing subscriber every service installs.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

static TRACING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether spans get OpenTelemetry contexts in this process (trace context
/// or export on): code that makes a span only for a trace asks this first,
/// so an untraced service pays nothing for it.
pub fn tracing_active() -> bool {
    TRACING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Keeps the tracer provider (and the exporter's runtime) alive; shut it
/// down at exit.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    /// The OTLP exporter's own small runtime: its gRPC channel and batch
    /// exports never take a turn on the service's runtime.
    exporter_rt: Option<tokio::runtime::Runtime>,
}

impl Telemetry {
    /// Exports the spans still batched (a bounded wait) and stops.
    pub fn shutdown(self) {
        if let Some(p) = self.provider {
            if let Err(e) = p.shutdown() {
                eprintln!("trace export at shutdown failed: {e}");
            }
        }
        if let Some(rt) = self.exporter_rt {
            rt.shutdown_timeout(std::time::Duration::from_secs(2));
        }
    }
}

/// [`init`] with the options every service takes: `--log`, `--log-format`,
/// `--trace-context` and `--otlp-endpoint` (which implies trace context).
pub fn init_from(service: &'static str, common: &crate::CommonArgs) -> anyhow::Result<Telemetry> {
    let otlp = common.otlp_endpoint.as_deref().filter(|e| !e.is_empty());
    init_with(service, &common.log, common.log_format, common.trace_context, otlp)
}

/// Installs logging to stderr filtered by `filter` (RUST_LOG syntax). With
/// `trace_context`, also an OpenTelemetry layer, so that spans carry W3C trace
/// and span ids and the RPC layer propagates them to peers; it costs a few
/// microseconds per request, so it is off unless traces are wanted. Exporting
/// spans (OTLP to Jaeger) is configured separately.
pub fn init(service: &'static str, filter: &str, format: LogFormat, trace_context: bool) -> anyhow::Result<Telemetry> {
    init_with(service, filter, format, trace_context, None)
}

/// [`init`], exporting spans by OTLP/gRPC to `otlp` (e.g.
/// `http://jaeger:4317`) when given. Spans leave in batches from a bounded
/// queue (full: new spans are dropped, never waited for), on a runtime of
/// their own.
pub fn init_with(
    service: &'static str,
    filter: &str,
    format: LogFormat,
    trace_context: bool,
    otlp: Option<&str>,
) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(filter).map_err(|e| anyhow::anyhow!("bad log filter {filter:?}: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service).build();
    let (provider, exporter_rt) = match otlp {
        Some(endpoint) => {
            use opentelemetry_otlp::WithExportConfig;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("otlp-export")
                .enable_all()
                .build()?;
            // The gRPC channel binds to the runtime it is made in.
            let exporter = {
                let _in_rt = rt.enter();
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint)
                    .build()
                    .map_err(|e| anyhow::anyhow!("OTLP exporter for {endpoint}: {e}"))?
            };
            let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
            (Some(provider), Some(rt))
        }
        None => (trace_context.then(|| SdkTracerProvider::builder().with_resource(resource).build()), None),
    };
    let otel = provider.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service)));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    match format {
        LogFormat::Text => registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)).try_init(),
        LogFormat::Json => {
            registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).try_init()
        }
    }
    .map_err(|e| anyhow::anyhow!("install logging: {e}"))?;
    TRACING.store(provider.is_some(), std::sync::atomic::Ordering::Relaxed);
    Ok(Telemetry { provider, exporter_rt })
}
