//! What every quire service binary shares.
//!
//! - [`config`]: options from flags, environment variables and a TOML file, in
//!   that order of precedence, declared once with clap.
//! - [`logging`]: the tracing subscriber (text or JSON) and the OpenTelemetry
//!   layer that gives spans W3C ids to propagate.
//! - [`service`]: the common options and the start/stop of a service's QUIC server.
//! - [`metrics`]: a Prometheus text endpoint for services without HTTP of their own.
//! - [`slot`]: numbered ids for the replicas of one service (compose `--scale`).

pub mod config;
pub mod logging;
pub mod metrics;
pub mod service;
pub mod slot;

pub use service::{new_instance_id, wait_for_shutdown_signal, CommonArgs, RunningService};
