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

/// Keeps the tracer provider alive; drop it at exit.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the tracer provider.
    pub fn shutdown(self) {
        if let Some(p) = self.provider {
            // Nothing is exported yet, so nothing can be lost by a failed flush.
            let _ = p.shutdown();
        }
    }
}

/// Installs logging to stderr filtered by `filter` (RUST_LOG syntax). With
/// `trace_context`, also an OpenTelemetry layer, so that spans carry W3C trace
/// and span ids and the RPC layer propagates them to peers; it costs a few
/// microseconds per request, so it is off unless traces are wanted. Exporting
/// spans (OTLP to Jaeger) is configured separately.
pub fn init(service: &'static str, filter: &str, format: LogFormat, trace_context: bool) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(filter).map_err(|e| anyhow::anyhow!("bad log filter {filter:?}: {e}"))?;
    let provider = trace_context.then(|| SdkTracerProvider::builder().build());
    let otel = provider.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service)));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    match format {
        LogFormat::Text => registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)).try_init(),
        LogFormat::Json => {
            registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).try_init()
        }
    }
    .map_err(|e| anyhow::anyhow!("install logging: {e}"))?;
    Ok(Telemetry { provider })
}
