//! W3C trace context (`traceparent` / `tracestate`) in and out of frames.
//!
//! The client stamps the current span's OpenTelemetry context on every request;
//! the server parents its request span on it. Without an OpenTelemetry layer
//! installed the current context is empty and nothing is sent.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `traceparent` and `tracestate` of the current span, if it has a valid context.
pub fn current() -> Option<(String, String)> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    Some((format_traceparent(sc), sc.trace_state().header()))
}

/// `00-<trace id>-<span id>-<flags>`.
pub fn format_traceparent(sc: &SpanContext) -> String {
    format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8())
}

/// Parses a `traceparent` (version 00) into a remote span context; `None` for
/// anything malformed, which is ignored rather than failing the request.
pub fn parse_traceparent(traceparent: &str, tracestate: &str) -> Option<SpanContext> {
    let mut parts = traceparent.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    // W3C caps tracestate at 32 members; a longer header is ignored, not parsed.
    let state = if tracestate.len() <= 512 {
        tracestate.parse::<TraceState>().unwrap_or_default()
    } else {
        TraceState::default()
    };
    let sc = SpanContext::new(trace_id, span_id, TraceFlags::new(flags & 1), true, state);
    sc.is_valid().then_some(sc)
}

/// An OpenTelemetry context whose remote parent is `sc`.
pub fn remote_context(sc: SpanContext) -> Context {
    Context::new().with_remote_span_context(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_rejects_garbage() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse_traceparent(tp, "").unwrap();
        assert_eq!(format_traceparent(&sc), tp);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-xyz-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad, "").is_none(), "{bad}");
        }
    }
}
