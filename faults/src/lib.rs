//! The fault suite (issue FAULTS): clients record every operation and its
//! outcome as a [`history`], faults are injected from a seeded schedule,
//! and [`check`] decides, from the history alone, whether any of quire's
//! guarantees (../shared/BRIEF.md) broke. The checker is plain code over
//! recorded events: no I/O, no clock, so every rule is unit-tested against
//! histories written by hand.

pub mod check;
pub mod floors;
pub mod history;
pub mod lab;
pub mod logs;
pub mod schedule;

pub use check::{check, Report, Violation};
pub use floors::{shortfalls, unapplied_kinds, Floors};
pub use history::{Event, History, HistoryError, Op, Outcome};
pub use logs::{check_logs, LogCounts, LogViolation};
pub use schedule::{schedule, Fault, FileKind, Step, Target, Timing, Topology};
