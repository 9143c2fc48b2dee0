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
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Flushes and stops the tracer provider.
    pub fn shutdown(self) {
        // Nothing is exported yet, so nothing can be lost by a failed flush.
        let _ = self.provider.shutdown();
    }
}

/// Installs logging to stderr filtered by `filter` (RUST_LOG syntax), and an
/// OpenTelemetry layer so that spans carry W3C trace and span ids that the RPC
/// layer propagates. Exporting spans (OTLP to Jaeger) is configured separately.
pub fn init(service: &'static str, filter: &str, format: LogFormat) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(filter).map_err(|e| anyhow::anyhow!("bad log filter {filter:?}: {e}"))?;
    let provider = SdkTracerProvider::builder().build();
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer(service));
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
