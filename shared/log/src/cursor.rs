//! Durable named cursors of a log (issue #23 item 6): where a reader
//! stands. A cursor's position is the next offset it will read: every
//! record below it is acknowledged. Acknowledging only moves a cursor
//! forward (by CAS on its version); a seek moves it anywhere the log still
//! holds. A cursor may hold retention: the log is not trimmed past its
//! slowest holding cursor.

use serde::{Deserialize, Serialize};

use crate::chain::LogRecord;

/// Cursors per log, at most.
pub const CURSORS_MAX: usize = 1024;

/// A cursor as the metadata service stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The log.
    pub log: String,
    /// The cursor's name (as a log's: 1 to 128 of `[A-Za-z0-9._-]`).
    pub name: String,
    /// The next offset to read.
    pub position: u64,
    /// Whether the log's trim point waits for it.
    pub holds_retention: bool,
    /// Bumped by every change: the CAS token.
    pub version: u64,
    /// Leader clock at the last change.
    pub updated_at_ms: u64,
}

/// How a cursor's position changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Move {
    /// Acknowledge up to (not including) the position: never back.
    Ack,
    /// Set it anywhere the log holds (at or past its trim point).
    Seek,
}

/// Whether `position` may be the cursor's next position: never below the
/// trim point (those records are gone), and by an acknowledgement never
/// back.
pub fn check_move(old: Option<&Cursor>, position: u64, how: Move, record: &LogRecord) -> Result<(), String> {
    if position < record.trim_before {
        return Err(format!(
            "log {} is trimmed before {}: a cursor cannot stand at {position}",
            record.name, record.trim_before
        ));
    }
    if let (Some(old), Move::Ack) = (old, how) {
        if position < old.position {
            return Err(format!(
                "cursor {} stands at {}: an acknowledgement does not move it back to {position} (seek does)",
                old.name, old.position
            ));
        }
    }
    Ok(())
}

/// The lowest position of the cursors that hold retention, if any: the log
/// may not be trimmed past it.
pub fn retention_floor<'a>(cursors: impl IntoIterator<Item = &'a Cursor>) -> Option<(u64, &'a str)> {
    cursors.into_iter().filter(|c| c.holds_retention).map(|c| (c.position, c.name.as_str())).min()
}

impl Cursor {
    /// As the wire carries it.
    pub fn to_wire(&self) -> quire_proto::v1::LogCursor {
        quire_proto::v1::LogCursor {
            log: self.log.clone(),
            name: self.name.clone(),
            position: self.position,
            holds_retention: self.holds_retention,
            version: self.version,
            updated_at_ms: self.updated_at_ms,
        }
    }

    /// From the wire.
    pub fn from_wire(c: &quire_proto::v1::LogCursor) -> Cursor {
        Cursor {
            log: c.log.clone(),
            name: c.name.clone(),
            position: c.position,
            holds_retention: c.holds_retention,
            version: c.version,
            updated_at_ms: c.updated_at_ms,
        }
    }

    /// As the HTTP API and the CLI show it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "position": self.position,
            "holds_retention": self.holds_retention,
            "version": self.version,
            "updated_at_ms": self.updated_at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(position: u64, holds: bool) -> Cursor {
        Cursor {
            log: "l".into(),
            name: format!("c{position}"),
            position,
            holds_retention: holds,
            version: 1,
            updated_at_ms: 0,
        }
    }

    #[test]
    fn acknowledgements_move_forward_and_seeks_stay_above_the_trim_point() {
        let (record, _) = LogRecord::new("l", "o", 1).roll(1, 9, 2).unwrap().trim(5).unwrap();
        let c = cursor(7, false);
        assert!(check_move(Some(&c), 8, Move::Ack, &record).is_ok());
        assert!(check_move(Some(&c), 6, Move::Ack, &record).is_err(), "an ack never moves back");
        assert!(check_move(Some(&c), 6, Move::Seek, &record).is_ok());
        assert!(check_move(Some(&c), 4, Move::Seek, &record).is_err(), "below the trim point");
        assert!(check_move(None, 5, Move::Ack, &record).is_ok());
    }

    #[test]
    fn the_slowest_holding_cursor_is_the_floor() {
        let cs = [cursor(9, true), cursor(3, false), cursor(6, true)];
        assert_eq!(retention_floor(&cs), Some((6, "c6")));
        assert_eq!(retention_floor(&[cursor(3, false)]), None);
    }
}
