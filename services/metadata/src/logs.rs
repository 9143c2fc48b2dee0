//! Logs in the metadata state (issue #23): creating one, the
//! compare-and-set of its record together with ledger updates, deleting
//! one. The record's own rules are quire-log's ([`quire_log::check_edit`]);
//! here are the ones that need the ledgers beside it: a segment is sealed
//! only with its ledger closed, at its records or at most one batch's
//! records more (a batch a takeover's recovery cut, never acknowledged and
//! left out of the log: issue #47 item 3; and no entry the log does not
//! count lies within it), a ledger joins a log only open and unlisted elsewhere, and a
//! ledger the log drops below its trim point is deleted with the edit.

use quire_log::config::LEDGER_KEY as LOG_LEDGER_KEY;

use crate::state::{
    ledger_right, Caller, Ledger, LedgerState, Log, MetaState, Outcome, Refusal, Touched, ENSEMBLE_MAX, OWNER_KEY,
};

/// Segments a log lists at most: a record is one metadata value, written
/// whole by every edit (trim the log, or roll less often, to stay below).
pub const LOG_SEGMENTS_MAX: usize = 65_536;

/// Whether certificate identity `who` (`role/id`) may change a log: its
/// creator, any gateway for a gateway's log (scaled replicas share the
/// API), the operator.
pub(crate) fn identity_may_change(log: &Log, who: &str) -> bool {
    log.creator == who
        || (who.starts_with("gateway/") && log.creator.starts_with("gateway/"))
        || who.starts_with("admin/")
}

/// Whether `caller` may change or delete a log `creator` made
/// ([`identity_may_change`]).
fn log_right(log: &Log, caller: &Caller) -> Result<(), Refusal> {
    if identity_may_change(log, &caller.identity()) {
        return Ok(());
    }
    Err(Refusal::PermissionDenied(format!("log {} is {}'s, not {}'s", log.record.name, log.creator, caller.identity())))
}

fn invalid(e: quire_log::ChainError) -> Refusal {
    Refusal::BadRequest(e.to_string())
}

/// The retention service (beside the auditor) may move the trim point and
/// nothing else.
fn only_trims(stored: &Log, new: &Log, edit: &quire_log::Edit, ledgers: usize) -> bool {
    ledgers == 0
        && edit.sealed.is_empty()
        && edit.opened.is_empty()
        && (new.record.epoch, &new.record.owner) == (stored.record.epoch, &stored.record.owner)
        && new.producers == stored.producers
        && new.config == stored.config
}

impl MetaState {
    /// The log (other than `except`) that lists `ledger_id`, if any.
    pub(crate) fn log_listing(&self, ledger_id: u64, except: &str) -> Option<&str> {
        self.logs.listing(ledger_id).find(|name| *name != except)
    }

    fn check_config(log: &Log) -> Result<(), Refusal> {
        let c = &log.config;
        if !(1 <= c.ack_quorum && c.ack_quorum <= c.write_quorum && c.write_quorum <= c.ensemble_size)
            || c.ensemble_size > ENSEMBLE_MAX
        {
            return Err(Refusal::BadRequest(format!(
                "log quorums must satisfy 1 <= ack ({}) <= write ({}) <= ensemble ({}) <= {ENSEMBLE_MAX}",
                c.ack_quorum, c.write_quorum, c.ensemble_size
            )));
        }
        if log.record.segments.len() > LOG_SEGMENTS_MAX {
            return Err(Refusal::BadRequest(format!(
                "log {} would list {} ledgers, more than {LOG_SEGMENTS_MAX}: trim it",
                log.record.name,
                log.record.segments.len()
            )));
        }
        let p = &log.producers;
        if p.by_id.len() > quire_log::producers::PRODUCERS_MAX
            || p.by_id.values().any(|s| s.recent.len() > quire_log::producers::WINDOW)
            || p.by_id.keys().any(|id| quire_log::envelope::validate_producer_id(id).is_err())
        {
            return Err(Refusal::BadRequest("the producer table is past its bounds".into()));
        }
        Ok(())
    }

    /// A ledger may join a log: it exists, is open (nothing was sealed into
    /// it before the log listed it), the caller may write it, and no other
    /// log lists it.
    fn check_joining(&self, ledger_id: u64, log: &str, caller: &Caller) -> Result<(), Refusal> {
        let l = self.ledgers.get(&ledger_id).ok_or(Refusal::NoSuchLedger(ledger_id))?;
        if l.state != LedgerState::Open {
            return Err(Refusal::BadRequest(format!("ledger {ledger_id} joins log {log} only while open")));
        }
        ledger_right(&l, Some(&l), caller)?;
        if let Some(other) = self.log_listing(ledger_id, log) {
            return Err(Refusal::BadRequest(format!("ledger {ledger_id} is log {other}'s")));
        }
        Ok(())
    }

    pub(crate) fn create_log(
        &mut self,
        mut log: Log,
        caller: &Caller,
        now_ms: u64,
    ) -> Result<(Outcome, Vec<Touched>), Refusal> {
        let name = log.record.name.clone();
        quire_log::config::validate_name(&name).map_err(Refusal::BadRequest)?;
        if self.logs.contains_key(&name) {
            return Err(Refusal::AlreadyExists(format!("log {name} exists")));
        }
        Self::check_config(&log)?;
        // A new log is epoch 1, one open segment from offset 0.
        let first = match log.record.segments.as_slice() {
            [s] if s.first_offset == 0 && s.end_offset.is_none() => s.ledger_id,
            _ => return Err(Refusal::BadRequest(format!("log {name} must start with one open ledger at offset 0"))),
        };
        if log.record.epoch != 1 || log.record.trim_before != 0 {
            return Err(Refusal::BadRequest(format!("log {name} starts at epoch 1 with nothing trimmed")));
        }
        log.record.check().map_err(invalid)?;
        // An HTTP principal is a gateway's word about its caller: only a
        // gateway may name one.
        if !log.principal.is_empty() {
            if caller.role != "gateway" {
                return Err(Refusal::PermissionDenied(format!(
                    "log {name}: only a gateway names an HTTP principal, not {}",
                    caller.identity()
                )));
            }
            quire_log::config::validate_principal(&log.principal).map_err(Refusal::BadRequest)?;
        }
        self.check_joining(first, &name, caller)?;
        log.producers = quire_log::Producers::default();
        log.creator = caller.identity();
        log.created_at_ms = now_ms;
        log.version = 1;
        self.logs.insert(name.clone(), log.clone());
        Ok((Outcome::Log(Box::new(log), Vec::new()), vec![Touched::Log(name)]))
    }

    pub(crate) fn update_log(
        &mut self,
        mut log: Log,
        expected_version: u64,
        ledgers: Vec<(Ledger, u64)>,
        caller: &Caller,
        now_ms: u64,
        may_cut: bool,
    ) -> Result<(Outcome, Vec<Touched>), Refusal> {
        let name = log.record.name.clone();
        let stored = self.logs.get(&name).ok_or_else(|| Refusal::NoSuchLog(name.clone()))?.clone();
        let stored = &stored;
        // A stale edit is a conflict first, whatever it would change: the
        // writer re-reads and builds on what is stored (a trim meanwhile).
        if stored.version != expected_version {
            return Err(Refusal::VersionConflict { actual: stored.version });
        }
        // The bounds before the record's own checks (which run on every
        // replica, in apply).
        Self::check_config(&log)?;
        let edit = quire_log::check_edit(&stored.record, &log.record).map_err(invalid)?;
        if !(caller.role == "auditor" && only_trims(stored, &log, &edit, ledgers.len())) {
            log_right(stored, caller)?;
        }
        let quorums = |l: &Log| (l.config.ensemble_size, l.config.write_quorum, l.config.ack_quorum);
        if quorums(&log) != quorums(stored) {
            return Err(Refusal::BadRequest(format!("log {name}: the ledger quorums are fixed at creation")));
        }
        if log.record.trim_before > stored.record.trim_before {
            if let Some((floor, cursor)) = quire_log::cursor::retention_floor(self.cursors_of(&name)) {
                if log.record.trim_before > floor {
                    return Err(Refusal::BadRequest(format!(
                        "log {name}: cursor {cursor} at {floor} holds retention; the log is not trimmed past it"
                    )));
                }
            }
        }
        if log.producers.covers_before < stored.producers.covers_before {
            return Err(Refusal::BadRequest(format!("log {name}: the producer table went back")));
        }
        for id in &edit.opened {
            self.check_joining(*id, &name, caller)?;
        }
        // Ledger updates only for ledgers the log lists, each at most once.
        let mut ids: Vec<u64> = ledgers.iter().map(|(l, _)| l.ledger_id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != ledgers.len() {
            return Err(Refusal::BadRequest("a ledger updated twice in one log update".into()));
        }
        // Everything from here on is linear in the segments (up to 65,536,
        // in apply, on every replica): one map of the stored ones.
        let stored_segments: std::collections::HashMap<u64, &quire_log::LogSegment> =
            stored.record.segments.iter().map(|s| (s.ledger_id, s)).collect();
        if let Some(id) = ids.iter().find(|id| !stored_segments.contains_key(id)) {
            return Err(Refusal::BadRequest(format!("ledger {id} is not log {name}'s")));
        }
        // Apply the ledger updates, keeping what they replace: any refusal
        // after this puts every one back (one change or none).
        let before: Vec<Ledger> = ids.iter().filter_map(|id| self.ledgers.get(id)).collect();
        let mut updated = Vec::new();
        let mut touched = Vec::new();
        let result = (|| {
            for (ledger, expected_version) in ledgers {
                let cmd = crate::state::Command::UpdateLedgerAs { ledger, expected_version, caller: caller.clone() };
                let (outcome, t) = self.try_apply(cmd)?;
                if let Outcome::Ledger(l) = outcome {
                    updated.push(l);
                }
                touched.extend(t);
            }
            for (id, entries) in &edit.sealed {
                let l = self.ledgers.get(id).ok_or(Refusal::NoSuchLedger(*id))?;
                // In i128: no count or entry id from a request wraps here
                // (check_edit bounds offsets, and this holds without it).
                // The log holds the closed ledger's entries up to its last
                // whole batch: a takeover leaves out a batch its recovery
                // cut (never acknowledged: a batch is answered once whole),
                // which is at most one batch's records short of the end. A
                // writer's own rollover seals what its ledger took, exactly.
                let held = i128::from(l.last_entry_id) + 1;
                let short = held - i128::from(*entries);
                let takeover = log.record.epoch > stored.record.epoch;
                let cut_max = if may_cut && takeover { quire_log::envelope::BATCH_RECORDS_MAX as i128 - 1 } else { 0 };
                if l.state != LedgerState::Closed || !(0..=cut_max).contains(&short) {
                    return Err(Refusal::BadRequest(format!(
                        "log {name} seals ledger {id} at {entries} records, but the ledger is {:?} at last entry {}",
                        l.state, l.last_entry_id
                    )));
                }
            }
            Ok(())
        })();
        if let Err(refusal) = result {
            for l in before {
                self.ledgers.insert(l.ledger_id, l);
            }
            return Err(refusal);
        }
        // Ledgers wholly below the trim point go with the edit (bookies'
        // garbage collection reclaims their entries).
        for id in &edit.dropped {
            if self.ledgers.remove(id).is_some() {
                self.marks.remove(id);
                touched.extend([Touched::Ledger(*id), Touched::Mark(*id)]);
            }
        }
        // Seal times are this service's: kept for the segments it had
        // sealed, stamped now for those this edit seals.
        for seg in &mut log.record.segments {
            seg.sealed_at_ms = match stored_segments.get(&seg.ledger_id) {
                Some(old) if old.end_offset.is_some() => old.sealed_at_ms,
                _ if seg.end_offset.is_some() => now_ms,
                _ => 0,
            };
        }
        log.creator = stored.creator.clone();
        log.principal = stored.principal.clone();
        log.created_at_ms = stored.created_at_ms;
        log.version = stored.version + 1;
        self.logs.insert(name.clone(), log.clone());
        touched.push(Touched::Log(name));
        Ok((Outcome::Log(Box::new(log), updated), touched))
    }

    /// Deletes the ledgers made for log `name` that no writer can ever
    /// list: a writer's next ledger made ahead of a rollover it never did
    /// (it stopped, or was fenced), a takeover's ledger whose CAS lost. Such
    /// a ledger is open, listed by no log, carries `log=<name>` and nothing
    /// else but its owner (as quire-client makes a log's ledgers: a ledger
    /// made over HTTP always carries its principal, so no HTTP ledger that
    /// merely names the log is taken for one), was made by an identity that
    /// may change the log, and is older than the newest ledger the log
    /// lists. Ledger ids only grow, and a writer lists only ledgers it made
    /// after its own takeover listed its first, so none older than that can
    /// join; and it holds no record, since a ledger takes appends only once
    /// its log lists it. (Run once per takeover, not per rollover.)
    pub(crate) fn sweep_log_ledgers(&mut self, name: &str) -> Result<(Outcome, Vec<Touched>), Refusal> {
        let log = self.logs.get(name).ok_or_else(|| Refusal::NoSuchLog(name.to_string()))?;
        let Some(newest) = log.record.segments.iter().map(|s| s.ledger_id).max() else {
            return Ok((Outcome::Deleted, Vec::new()));
        };
        let touched = self.sweep_made_for(name, newest);
        Ok((Outcome::Deleted, touched))
    }

    /// Deletes the open, unlisted ledgers below `below` made for log
    /// `name` (which is still stored: whether their maker may change it is
    /// judged against it), as [`MetaState::sweep_log_ledgers`] describes.
    fn sweep_made_for(&mut self, name: &str, below: u64) -> Vec<Touched> {
        let Some(log) = self.logs.get(name) else { return Vec::new() };
        let made_for_it = |l: &Ledger| {
            l.custom.len() == 2
                && l.custom.get(LOG_LEDGER_KEY).is_some_and(|v| v.as_slice() == name.as_bytes())
                && l.custom.get(OWNER_KEY).is_some_and(|o| identity_may_change(log, &String::from_utf8_lossy(o)))
        };
        // Through the index: what the log's ledgers hold, not the cluster's.
        let doomed: Vec<u64> = self
            .ledgers
            .made_for(name)
            .take_while(|id| *id < below)
            .filter(|id| self.ledgers.get(id).is_some_and(|l| l.state == LedgerState::Open && made_for_it(&l)))
            .filter(|id| self.log_listing(*id, "").is_none())
            .collect();
        let mut touched = Vec::new();
        for id in doomed {
            tracing::info!(log = name, ledger_id = id, "deleted a ledger made for a log that no writer can list");
            self.ledgers.remove(&id);
            self.marks.remove(&id);
            touched.extend([Touched::Ledger(id), Touched::Mark(id)]);
        }
        touched
    }

    /// Deletes log `name` with the ledgers it lists, and (`sweep`) the ones
    /// made for it and never listed. `fenced`: only once the open
    /// segment's ledger is closed (the deleter recovered it, fencing its
    /// writer), and, unless it is 0, at that version of the log.
    pub(crate) fn delete_log(
        &mut self,
        name: &str,
        caller: &Caller,
        sweep: bool,
        fenced: Option<u64>,
    ) -> Result<(Outcome, Vec<Touched>), Refusal> {
        let stored = self.logs.get(name).ok_or_else(|| Refusal::NoSuchLog(name.to_string()))?;
        log_right(stored, caller)?;
        if let Some(expected_version) = fenced {
            // A rollover between the deleter's recovery and this lists a
            // ledger nobody fenced: deleting under its writer would leave
            // it appending, acknowledged by the bookies, to a log that is
            // gone (and whose name may be made again from offset 0).
            if expected_version != 0 && stored.version != expected_version {
                return Err(Refusal::VersionConflict { actual: stored.version });
            }
            if let Some(open) = stored.record.open_segment() {
                if self.ledgers.get(&open.ledger_id).is_some_and(|l| l.state != LedgerState::Closed) {
                    return Err(Refusal::VersionConflict { actual: stored.version });
                }
            }
        }
        let ids: Vec<u64> = stored.record.segments.iter().map(|s| s.ledger_id).collect();
        let mut touched = vec![Touched::Log(name.to_string())];
        for id in ids {
            if self.ledgers.remove(&id).is_some() {
                self.marks.remove(&id);
                touched.extend([Touched::Ledger(id), Touched::Mark(id)]);
            }
        }
        // With it go the ledgers made for it and never listed (its writer's
        // next one, a takeover's that lost): once the log is gone no writer
        // lists them. A creator of a new log of the same name whose first
        // ledger this takes has its CreateLog refused (NoSuchLedger) and
        // makes another (quire-client does).
        if sweep {
            touched.extend(self.sweep_made_for(name, u64::MAX));
        }
        self.logs.remove(name);
        // Its ownership lock goes too: a writer's renewals then fail, and a
        // log made again under the name is nobody's until taken.
        let lock = quire_log::config::owner_lock(name);
        if self.locks.remove(&lock).is_some() {
            touched.push(Touched::Lock(lock));
        }
        let cursors: Vec<(String, String)> = self.cursors_of(name).map(|c| (c.log.clone(), c.name.clone())).collect();
        for key in cursors {
            self.cursors.remove(&key);
            touched.push(Touched::Cursor(key.0, key.1));
        }
        Ok((Outcome::Deleted, touched))
    }

    /// The cursors of log `name`.
    pub fn cursors_of<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a quire_log::Cursor> + 'a {
        use std::ops::Bound::{Excluded, Included};
        let lo = (name.to_string(), String::new());
        // Names are ASCII (validate_name): "\u{7f}" sorts after every one.
        let hi = (name.to_string(), "\u{7f}".to_string());
        self.cursors.range((Included(lo), Excluded(hi))).map(|(_, c)| c)
    }

    pub(crate) fn put_cursor(
        &mut self,
        mut cursor: quire_log::Cursor,
        expected_version: u64,
        seek: bool,
        now_ms: u64,
        caller: &Caller,
    ) -> Result<(Outcome, Vec<Touched>), Refusal> {
        let log = self.logs.get(&cursor.log).ok_or_else(|| Refusal::NoSuchLog(cursor.log.clone()))?;
        quire_log::config::validate_name(&cursor.name).map_err(|e| Refusal::BadRequest(format!("cursor: {e}")))?;
        let key = (cursor.log.clone(), cursor.name.clone());
        let old = self.cursors.get(&key);
        // A cursor that holds retention holds the log's space: only who may
        // change the log may make one, move one or let one go. Any reader
        // may keep a cursor that holds nothing.
        if cursor.holds_retention || old.is_some_and(|o| o.holds_retention) {
            log_right(log, caller)?;
        }
        if old.is_some_and(|o| o.holds_retention != cursor.holds_retention) {
            return Err(Refusal::BadRequest(format!("cursor {}: holds_retention is set at creation", cursor.name)));
        }
        match (old, expected_version) {
            (None, 0) => {
                if self.cursors_of(&cursor.log).count() >= quire_log::cursor::CURSORS_MAX {
                    return Err(Refusal::BadRequest(format!(
                        "log {} has {} cursors already",
                        cursor.log,
                        quire_log::cursor::CURSORS_MAX
                    )));
                }
            }
            (None, _) => return Err(Refusal::NotFound(format!("no cursor {} on log {}", cursor.name, cursor.log))),
            (Some(o), v) if o.version != v => return Err(Refusal::VersionConflict { actual: o.version }),
            (Some(_), _) => {}
        }
        let how = if seek || old.is_none() { quire_log::cursor::Move::Seek } else { quire_log::cursor::Move::Ack };
        quire_log::cursor::check_move(old, cursor.position, how, &log.record).map_err(Refusal::BadRequest)?;
        cursor.version = old.map_or(0, |o| o.version) + 1;
        cursor.updated_at_ms = now_ms;
        self.cursors.insert(key.clone(), cursor.clone());
        Ok((Outcome::Cursor(cursor), vec![Touched::Cursor(key.0, key.1)]))
    }

    pub(crate) fn delete_cursor(
        &mut self,
        log: &str,
        name: &str,
        caller: &Caller,
    ) -> Result<(Outcome, Vec<Touched>), Refusal> {
        let key = (log.to_string(), name.to_string());
        let c = self.cursors.get(&key).ok_or_else(|| Refusal::NotFound(format!("no cursor {name} on log {log}")))?;
        if c.holds_retention {
            if let Some(l) = self.logs.get(log) {
                log_right(l, caller)?;
            }
        }
        self.cursors.remove(&key);
        Ok((Outcome::Deleted, vec![Touched::Cursor(key.0, key.1)]))
    }

    /// Log names after `start_after`, at most `limit`, and the next to ask from.
    pub fn list_logs(&self, start_after: &str, limit: usize) -> (Vec<String>, Option<String>) {
        use std::ops::Bound::{Excluded, Unbounded};
        let lower = if start_after.is_empty() { Unbounded } else { Excluded(start_after.to_string()) };
        let mut names: Vec<String> =
            self.logs.range((lower, Unbounded)).take(limit + 1).map(|(n, _)| n.clone()).collect();
        let next = (names.len() > limit).then(|| {
            names.truncate(limit);
            names.last().cloned().unwrap_or_default()
        });
        (names, next)
    }
}

/// A stored log for tests: `name`, made by `creator`, one open ledger 1
/// (E = Qw = Qa = 1), at version 1, no principal.
#[cfg(test)]
pub(crate) fn test_log(name: &str, creator: &str) -> Log {
    Log {
        record: quire_log::LogRecord::new(name, "o", 1),
        config: quire_log::LogConfig {
            ensemble_size: 1,
            write_quorum: 1,
            ack_quorum: 1,
            rollover: Default::default(),
            retention: Default::default(),
        },
        producers: Default::default(),
        creator: creator.into(),
        created_at_ms: 0,
        version: 1,
        principal: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Command, NewLedger, OWNER_KEY};
    use quire_log::{LogConfig, LogRecord, Producers, Retention, Rollover};
    use std::collections::BTreeMap;

    fn gw() -> Caller {
        Caller { role: "gateway".into(), id: "1".into() }
    }

    fn ledger(s: &mut MetaState, owner: &str) -> Ledger {
        let custom = BTreeMap::from([(OWNER_KEY.to_string(), owner.as_bytes().to_vec())]);
        let new = NewLedger {
            ensemble_size: 3,
            write_quorum: 3,
            ack_quorum: 2,
            bookie_ids: vec!["b1".into(), "b2".into(), "b3".into()],
            instance_ids: vec![],
            custom,
            now_ms: 1,
        };
        match s.apply(Command::CreateLedger(new)).0 {
            Outcome::Ledger(l) => l,
            o => panic!("{o:?}"),
        }
    }

    /// A ledger made by `owner` for log `log`, as quire-client makes them.
    fn log_ledger(s: &mut MetaState, owner: &str, log: &str) -> Ledger {
        let mut l = ledger(s, owner);
        l.custom.insert(LOG_LEDGER_KEY.into(), log.as_bytes().to_vec());
        s.ledgers.insert(l.ledger_id, l.clone());
        l
    }

    /// A ledger made over HTTP by gateway 1 for principal alice that
    /// merely names log `log` (HTTP ledgers always carry their principal).
    fn http_ledger(s: &mut MetaState, log: &str) -> Ledger {
        let mut l = log_ledger(s, "gateway/1", log);
        l.custom.insert(crate::state::PRINCIPAL_KEY.into(), b"alice".to_vec());
        s.ledgers.insert(l.ledger_id, l.clone());
        l
    }

    /// After a takeover, the ledgers made for the log that no writer can
    /// list go: a fenced writer's next ledger, a takeover's that lost its
    /// CAS. What a writer may still list (made after the log's newest),
    /// what the log lists, other logs' ledgers and ledgers that only claim
    /// the log (their maker may not change it) stay.
    #[test]
    fn a_takeover_sweeps_the_ledgers_no_writer_can_list() {
        let mut s = MetaState::default();
        let l1 = log_ledger(&mut s, "gateway/1", "l");
        let log = stored(
            s.apply(Command::CreateLog {
                log: meta(LogRecord::new("l", "gw-a", l1.ledger_id)),
                caller: gw(),
                now_ms: 0,
            })
            .0,
        );
        let premade = log_ledger(&mut s, "gateway/1", "l");
        let claims = log_ledger(&mut s, "client/app", "l");
        let others = log_ledger(&mut s, "gateway/1", "other");
        let lost_cas = log_ledger(&mut s, "gateway/2", "l");
        let http = http_ledger(&mut s, "l");
        let l5 = log_ledger(&mut s, "gateway/2", "l");
        let taken = log.record.take_over("gw-b", 3, l5.ledger_id).unwrap();
        let log = stored(update(&mut s, &log, taken, vec![closed(&l1, 3)], &gw()));
        assert_eq!(log.record.epoch, 2);
        let next = log_ledger(&mut s, "gateway/2", "l");
        let (o, touched) = s.apply(Command::SweepLogLedgers { log: "l".into() });
        assert_eq!(o, Outcome::Deleted);
        let gone: Vec<u64> = [premade.ledger_id, lost_cas.ledger_id].into();
        assert_eq!(touched.len(), 4, "{touched:?}");
        for id in &gone {
            assert!(!s.ledgers.contains_key(id), "ledger {id} swept");
        }
        for kept in [l1.ledger_id, l5.ledger_id, claims.ledger_id, others.ledger_id, http.ledger_id, next.ledger_id] {
            assert!(s.ledgers.contains_key(&kept), "ledger {kept} kept");
        }
        // Again: nothing more; and a log that does not exist sweeps nothing.
        assert!(s.apply(Command::SweepLogLedgers { log: "l".into() }).1.is_empty());
        assert!(matches!(
            s.apply(Command::SweepLogLedgers { log: "none".into() }).0,
            Outcome::Refused(Refusal::NoSuchLog(_))
        ));
    }

    /// Raft entries hold commands by variant index (postcard): a command an
    /// earlier build replicated must decode as the same command, so the
    /// log commands' indices never move and new ones go last.
    #[test]
    fn the_log_commands_keep_their_places_in_the_encoding() {
        let c = || gw();
        let index = |cmd: Command| postcard::to_stdvec(&cmd).unwrap()[0];
        assert_eq!(index(Command::DeleteLog { name: "l".into(), caller: c() }), 23);
        assert_eq!(index(Command::DeleteCursor { log: "l".into(), name: "c".into(), caller: c() }), 25);
        let take = Command::TakeLock { name: "log/l".into(), owner: "o".into(), lease_ms: 1, now_ms: 1 };
        assert_eq!(index(take), 27);
        assert_eq!(index(Command::SweepLogLedgers { log: "l".into() }), 28);
        assert_eq!(index(Command::DeleteLogAndSweep { name: "l".into(), caller: c() }), 29);
        let fenced = Command::DeleteLogFenced { name: "l".into(), expected_version: 1, caller: c() };
        assert_eq!(index(fenced), 30);
    }

    /// Issue #47, hole 1: a delete is refused while the open segment's
    /// ledger is open (its writer would go on being acknowledged by the
    /// bookies into a log that is gone), and at another version than the
    /// one its caller fenced (a rollover since listed a ledger it did not
    /// recover); refused, nothing changes. Closed at the version asked for,
    /// the log goes. A DeleteLogAndSweep replays as it was applied.
    #[test]
    fn a_delete_goes_only_with_the_open_ledger_closed_at_the_version_fenced() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "gateway/1");
        let log = create(&mut s, "l", l1.ledger_id);
        let delete = |expected_version| Command::DeleteLogFenced { name: "l".into(), expected_version, caller: gw() };
        let before = s.logs["l"].clone();
        for v in [0, 1] {
            let out = s.apply(delete(v)).0;
            assert!(matches!(out, Outcome::Refused(Refusal::VersionConflict { actual: 1 })), "{out:?}");
        }
        assert_eq!(s.logs["l"], before, "refused while ledger 1 is open");
        // The writer rolls (ledger 1 closed, ledger 2 open) after a deleter
        // read version 1 and recovered ledger 1.
        let l2 = ledger(&mut s, "gateway/1");
        let log =
            stored(update(&mut s, &log, log.record.roll(1, 9, l2.ledger_id).unwrap(), vec![closed(&l1, 9)], &gw()));
        let out = s.apply(delete(1)).0;
        assert!(matches!(out, Outcome::Refused(Refusal::VersionConflict { actual: 2 })), "{out:?}");
        assert!(matches!(s.apply(delete(2)).0, Outcome::Refused(_)), "ledger 2 is still open");
        assert!(s.ledgers.contains_key(&l2.ledger_id));
        // Recovered: closed at the version fenced, the log goes.
        let (c2, _) = closed(&s.ledgers.get(&l2.ledger_id).unwrap(), 3);
        s.ledgers.insert(l2.ledger_id, c2);
        assert_eq!(s.apply(delete(log.version)).0, Outcome::Deleted);
        assert!(s.logs.is_empty() && s.ledgers.is_empty());
        // An earlier build's delete replays as it was applied (open ledger or not).
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "gateway/1");
        create(&mut s, "l", l1.ledger_id);
        assert_eq!(s.apply(Command::DeleteLogAndSweep { name: "l".into(), caller: gw() }).0, Outcome::Deleted);
    }

    /// Deleting a log takes with it the ledgers made for it that it never
    /// listed, whatever their id (its writer's next ledger is newer than
    /// any it lists); ledgers of other logs, ledgers that only claim the
    /// log and HTTP ledgers naming it stay. A creator of a new log of the
    /// same name whose first ledger went is refused, not given a log over
    /// a deleted ledger.
    #[test]
    fn deleting_a_log_takes_the_ledgers_made_for_it() {
        let mut s = MetaState::default();
        let l1 = log_ledger(&mut s, "gateway/1", "l");
        create(&mut s, "l", l1.ledger_id);
        let premade = log_ledger(&mut s, "gateway/1", "l");
        let recreating = log_ledger(&mut s, "gateway/2", "l");
        let claims = log_ledger(&mut s, "client/app", "l");
        let others = log_ledger(&mut s, "gateway/1", "other");
        let http = http_ledger(&mut s, "l");
        // A DeleteLog (applied before the sweep was part of a delete)
        // replays as it was applied: the listed ledger goes, no other.
        let mut replayed = s.clone();
        replayed.apply(Command::DeleteLog { name: "l".into(), caller: gw() });
        assert!(!replayed.ledgers.contains_key(&l1.ledger_id));
        assert!(replayed.ledgers.contains_key(&premade.ledger_id), "an earlier command replays as applied");
        let (o, touched) = s.apply(Command::DeleteLogAndSweep { name: "l".into(), caller: gw() });
        assert_eq!(o, Outcome::Deleted);
        for gone in [l1.ledger_id, premade.ledger_id, recreating.ledger_id] {
            assert!(!s.ledgers.contains_key(&gone), "ledger {gone} deleted");
            assert!(touched.contains(&Touched::Ledger(gone)), "{touched:?}");
        }
        for kept in [claims.ledger_id, others.ledger_id, http.ledger_id] {
            assert!(s.ledgers.contains_key(&kept), "ledger {kept} kept");
        }
        let again = s.apply(Command::CreateLog {
            log: meta(LogRecord::new("l", "o", recreating.ledger_id)),
            caller: gw(),
            now_ms: 0,
        });
        assert_eq!(again.0, Outcome::Refused(Refusal::NoSuchLedger(recreating.ledger_id)));
    }

    fn closed(l: &Ledger, last: i64) -> (Ledger, u64) {
        let mut c = l.clone();
        c.state = LedgerState::Closed;
        c.last_entry_id = last;
        c.length = (last + 1) as u64;
        (c, l.version)
    }

    fn config() -> LogConfig {
        LogConfig {
            ensemble_size: 3,
            write_quorum: 3,
            ack_quorum: 2,
            rollover: Rollover::default(),
            retention: Retention::default(),
        }
    }

    fn meta(record: LogRecord) -> Log {
        Log {
            record,
            config: config(),
            producers: Producers::default(),
            creator: String::new(),
            created_at_ms: 0,
            version: 0,
            principal: String::new(),
        }
    }

    /// Log `name` created by gateway 1 over `ledger_id`, as stored.
    fn create(s: &mut MetaState, name: &str, ledger_id: u64) -> Log {
        stored(
            s.apply(Command::CreateLog { log: meta(LogRecord::new(name, "o", ledger_id)), caller: gw(), now_ms: 0 }).0,
        )
    }

    fn stored(o: Outcome) -> Log {
        match o {
            Outcome::Log(l, _) => *l,
            o => panic!("{o:?}"),
        }
    }

    fn update(
        s: &mut MetaState,
        log: &Log,
        record: LogRecord,
        ledgers: Vec<(Ledger, u64)>,
        caller: &Caller,
    ) -> Outcome {
        let new = Log { record, ..log.clone() };
        s.apply(Command::UpdateLog {
            log: new,
            expected_version: log.version,
            ledgers,
            caller: caller.clone(),
            now_ms: 99,
        })
        .0
    }

    /// Rollover closes the old ledger and lists the next in one command;
    /// a takeover seals at the recovered end; a trim deletes the ledgers it
    /// drops.
    #[test]
    fn a_log_rolls_is_taken_over_and_trimmed_with_its_ledgers() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "gateway/1");
        let log = stored(
            s.apply(Command::CreateLog {
                log: meta(LogRecord::new("orders", "gw-a", l1.ledger_id)),
                caller: gw(),
                now_ms: 5,
            })
            .0,
        );
        assert_eq!((log.version, log.creator.as_str(), log.created_at_ms), (1, "gateway/1", 5));
        let l2 = ledger(&mut s, "gateway/1");
        let rolled = log.record.roll(1, 9, l2.ledger_id).unwrap();
        let log = stored(update(&mut s, &log, rolled, vec![closed(&l1, 9)], &gw()));
        assert_eq!(s.ledgers.get(&l1.ledger_id).unwrap().state, LedgerState::Closed);
        assert_eq!(
            log.record.segments.iter().map(|s| s.sealed_at_ms).collect::<Vec<_>>(),
            vec![99, 0],
            "sealed now, by this service's clock"
        );
        // Another gateway replica takes over: l2 recovered at entry 4 (closed by the recovery).
        let l3 = ledger(&mut s, "gateway/2");
        let (c2, _) = closed(&l2, 4);
        s.ledgers.insert(l2.ledger_id, Ledger { version: l2.version + 1, ..c2 });
        let taken = log.record.take_over("gw-b", 4, l3.ledger_id).unwrap();
        let gw2 = Caller { role: "gateway".into(), id: "2".into() };
        let log = stored(update(&mut s, &log, taken, vec![], &gw2));
        assert_eq!((log.record.epoch, log.version), (2, 3));
        // Trim to 12: ledger 1 (0..10) goes, with its metadata.
        let (trimmed, gone) = log.record.trim(12).unwrap();
        assert_eq!(gone, vec![l1.ledger_id]);
        let log = stored(update(&mut s, &log, trimmed, vec![], &gw()));
        assert!(!s.ledgers.contains_key(&l1.ledger_id));
        assert!(s.ledgers.contains_key(&l2.ledger_id));
        // A ledger a log lists is deleted only with the log (or a trim).
        let o = s.apply(Command::DeleteLedgerAs { ledger_id: l2.ledger_id, caller: gw() }).0;
        assert!(matches!(o, Outcome::Refused(Refusal::LedgerInLog(_))), "{o:?}");
        // Deleting the log deletes what it lists.
        assert_eq!(s.apply(Command::DeleteLogAndSweep { name: "orders".into(), caller: gw() }).0, Outcome::Deleted);
        assert!(s.ledgers.is_empty() && s.logs.is_empty(), "{:?}", s.ledgers.ids().collect::<Vec<_>>());
        let _ = log;
    }

    /// A seal that does not match its ledger is refused, and the ledger
    /// updates beside it are undone: one change or none.
    #[test]
    fn a_seal_must_match_its_closed_ledger_or_nothing_changes() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "gateway/1");
        let log = create(&mut s, "l", l1.ledger_id);
        let l2 = ledger(&mut s, "gateway/1");
        // Sealed at 12 records, ledger closed at 10: refused, ledger still open.
        let too_long = log.record.roll(1, 11, l2.ledger_id).unwrap();
        let out = update(&mut s, &log, too_long, vec![closed(&l1, 9)], &gw());
        assert!(matches!(out, Outcome::Refused(Refusal::BadRequest(_))), "{out:?}");
        assert_eq!(s.ledgers.get(&l1.ledger_id).unwrap(), l1, "the close was undone");
        assert_eq!(s.logs["l"].version, 1);
        // Sealed short of its ledger by more than a batch (the most a
        // takeover leaves out, a batch its recovery cut): refused.
        let rolled = log.record.roll(1, 9, l2.ledger_id).unwrap();
        let cut = quire_log::envelope::BATCH_RECORDS_MAX as i64;
        let out = update(&mut s, &log, rolled.clone(), vec![closed(&l1, 9 + cut)], &gw());
        assert!(matches!(out, Outcome::Refused(Refusal::BadRequest(_))), "{out:?}");
        assert_eq!(s.ledgers.get(&l1.ledger_id).unwrap(), l1, "the close was undone");
        // Sealed while the ledger is still open: refused.
        assert!(matches!(update(&mut s, &log, rolled.clone(), vec![], &gw()), Outcome::Refused(_)));
        // A ledger another log lists cannot join.
        let other = create(&mut s, "m", l2.ledger_id);
        assert!(matches!(update(&mut s, &log, rolled, vec![closed(&l1, 9)], &gw()), Outcome::Refused(_)));
        assert_eq!(s.ledgers.get(&l1.ledger_id).unwrap(), l1);
        // A stale version conflicts.
        let l3 = ledger(&mut s, "gateway/1");
        let rolled = log.record.roll(1, 9, l3.ledger_id).unwrap();
        let mut stale = log.clone();
        stale.version = 0;
        assert!(matches!(
            update(&mut s, &stale, rolled.clone(), vec![closed(&l1, 9)], &gw()),
            Outcome::Refused(Refusal::VersionConflict { actual: 1 })
        ));
        // A ledger update for a ledger the log does not list is refused.
        let foreign = closed(&s.ledgers.get(&l2.ledger_id).unwrap(), -1);
        assert!(matches!(
            update(&mut s, &log, rolled.clone(), vec![closed(&l1, 9), foreign], &gw()),
            Outcome::Refused(_)
        ));
        assert!(matches!(update(&mut s, &log, rolled, vec![closed(&l1, 9)], &gw()), Outcome::Log(..)));
        let _ = other;
    }

    /// Issue #47 item 3: a takeover may seal the open segment short of its
    /// closed ledger by a batch the recovery cut (UpdateLogCutting, what the
    /// service logs now), a rollover never; and an UpdateLog logged by an
    /// earlier build replays as it was applied: exact.
    #[test]
    fn only_a_takeover_seals_short_of_its_ledger_and_only_by_a_batch() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "gateway/1");
        let log = create(&mut s, "l", l1.ledger_id);
        let l2 = ledger(&mut s, "gateway/1");
        let cutting = |s: &mut MetaState, record: LogRecord, ledgers: Vec<(Ledger, u64)>| {
            let log = Log { record, ..log.clone() };
            let cmd = Command::UpdateLogCutting { log, expected_version: 1, ledgers, caller: gw(), now_ms: 99 };
            s.apply(cmd).0
        };
        // The ledger closed at entry 6; the log keeps 5 records (a batch
        // cut at entries 5 and 6).
        let rolled = log.record.roll(1, 4, l2.ledger_id).unwrap();
        let out = cutting(&mut s, rolled, vec![closed(&l1, 6)]);
        assert!(matches!(out, Outcome::Refused(Refusal::BadRequest(_))), "a rollover seals exactly: {out:?}");
        let taken = log.record.take_over("b", 4, l2.ledger_id).unwrap();
        let out = update(&mut s, &log, taken.clone(), vec![closed(&l1, 6)], &gw());
        assert!(matches!(out, Outcome::Refused(Refusal::BadRequest(_))), "an UpdateLog replays exact: {out:?}");
        let out = cutting(&mut s, taken, vec![closed(&l1, 6)]);
        assert!(matches!(out, Outcome::Log(..)), "{out:?}");
        assert_eq!(s.logs["l"].record.segments[0].end_offset, Some(5));
    }

    /// A crafted seal of 2^63 records (a ledger closed at entry i64::MAX):
    /// refused with a clear error in apply, on every replica alike, with
    /// nothing changed. Before offsets were bounded, `entries as i64 - 1`
    /// overflowed here (a panic in a debug build; in release it wrapped
    /// back to i64::MAX and the seal was accepted, with offsets past what
    /// any later edit could add to without wrapping).
    #[test]
    fn a_seal_past_the_largest_offset_is_refused_and_nothing_changes() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "gateway/1");
        let log = create(&mut s, "l", l1.ledger_id);
        let l2 = ledger(&mut s, "gateway/1");
        let mut huge = l1.clone();
        huge.state = LedgerState::Closed;
        huge.last_entry_id = i64::MAX;
        let mut rolled = log.record.clone();
        rolled.segments[0].end_offset = Some(1 << 63);
        rolled.segments.push(quire_log::LogSegment {
            ledger_id: l2.ledger_id,
            first_offset: 1 << 63,
            end_offset: None,
            sealed_at_ms: 0,
        });
        let out = update(&mut s, &log, rolled, vec![(huge, l1.version)], &gw());
        assert!(matches!(&out, Outcome::Refused(Refusal::BadRequest(why)) if why.contains("offset")), "{out:?}");
        assert_eq!(s.ledgers.get(&l1.ledger_id).unwrap(), l1, "the ledger is as it was");
        assert_eq!(s.logs["l"], log, "the log is as it was");
    }

    /// A writer that missed a trim gets a conflict (and re-reads), not a
    /// refusal of the trim point it did not know had moved.
    #[test]
    fn a_stale_edit_is_a_conflict_before_anything_else() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "gateway/1");
        let log = create(&mut s, "l", l1.ledger_id);
        let l2 = ledger(&mut s, "gateway/1");
        let log2 =
            stored(update(&mut s, &log, log.record.roll(1, 9, l2.ledger_id).unwrap(), vec![closed(&l1, 9)], &gw()));
        let (trimmed, _) = log2.record.trim(10).unwrap();
        stored(update(&mut s, &log2, trimmed, vec![], &gw()));
        let l3 = ledger(&mut s, "gateway/1");
        let stale_roll = log2.record.roll(1, 4, l3.ledger_id).unwrap();
        let out = update(&mut s, &log2, stale_roll, vec![], &gw());
        assert_eq!(out, Outcome::Refused(Refusal::VersionConflict { actual: 3 }));
    }

    /// A log's HTTP principal is a gateway's to name, at creation only: no
    /// other role names one, no update changes it, and it survives the
    /// Raft command's encoding (which the record's own skips).
    #[test]
    fn only_a_gateway_names_a_logs_principal_and_nothing_changes_it() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "client/app");
        let app = Caller { role: "client".into(), id: "app".into() };
        let create = |name: &str, principal: &str, caller: &Caller, ledger_id: u64| Command::CreateLogFor {
            log: meta(LogRecord::new(name, "o", ledger_id)),
            principal: principal.into(),
            caller: caller.clone(),
            now_ms: 0,
        };
        let o = s.apply(create("l", "alice", &app, l1.ledger_id)).0;
        assert!(matches!(o, Outcome::Refused(Refusal::PermissionDenied(_))), "{o:?}");
        let g1 = ledger(&mut s, "gateway/1");
        for bad in ["a/b".to_string(), "x".repeat(65)] {
            let o = s.apply(create("l", &bad, &gw(), g1.ledger_id)).0;
            assert!(matches!(o, Outcome::Refused(Refusal::BadRequest(_))), "{bad:?}: {o:?}");
        }
        let cmd = create("l", "alice", &gw(), g1.ledger_id);
        let cmd: Command = postcard::from_bytes(&postcard::to_stdvec(&cmd).unwrap()).unwrap();
        let log = stored(s.apply(cmd).0);
        assert_eq!(log.principal, "alice");
        // An update naming another principal (or none) leaves it.
        let g2 = ledger(&mut s, "gateway/1");
        let claim = Log { principal: "mallory".into(), ..log.clone() };
        let rolled = log.record.roll(1, 0, g2.ledger_id).unwrap();
        let log = stored(update(&mut s, &claim, rolled, vec![closed(&g1, 0)], &gw()));
        assert_eq!((log.principal.as_str(), s.logs["l"].principal.as_str()), ("alice", "alice"));
        // The older command names none, whatever its record says.
        let g3 = ledger(&mut s, "gateway/1");
        let old = Command::CreateLog {
            log: Log { principal: "alice".into(), ..meta(LogRecord::new("m", "o", g3.ledger_id)) },
            caller: gw(),
            now_ms: 0,
        };
        assert_eq!(stored(s.apply(old).0).principal, "");
    }

    /// Who may change a log: its creator (any gateway for a gateway's), the
    /// operator; the retention service only its trim point.
    #[test]
    fn only_the_creator_changes_a_log_and_the_auditor_only_trims_it() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "client/app");
        let app = Caller { role: "client".into(), id: "app".into() };
        let log = stored(
            s.apply(Command::CreateLog {
                log: meta(LogRecord::new("l", "o", l1.ledger_id)),
                caller: app.clone(),
                now_ms: 0,
            })
            .0,
        );
        let l2 = ledger(&mut s, "client/app");
        let rolled = log.record.roll(1, 9, l2.ledger_id).unwrap();
        let other = Caller { role: "client".into(), id: "intruder".into() };
        assert!(matches!(
            update(&mut s, &log, rolled.clone(), vec![closed(&l1, 9)], &other),
            Outcome::Refused(Refusal::PermissionDenied(_))
        ));
        let auditor = Caller { role: "auditor".into(), id: "1".into() };
        assert!(matches!(update(&mut s, &log, rolled.clone(), vec![closed(&l1, 9)], &auditor), Outcome::Refused(_)));
        let log = stored(update(&mut s, &log, rolled, vec![closed(&l1, 9)], &app));
        let (trimmed, _) = log.record.trim(10).unwrap();
        let log = stored(update(&mut s, &log, trimmed, vec![], &auditor));
        assert_eq!(log.record.trim_before, 10);
        assert!(matches!(
            s.apply(Command::DeleteLogAndSweep { name: "l".into(), caller: other }).0,
            Outcome::Refused(Refusal::PermissionDenied(_))
        ));
        // Names and shapes are checked at creation.
        let l9 = ledger(&mut s, "client/app");
        for bad in ["a/b", ""] {
            let o = s
                .apply(Command::CreateLog {
                    log: meta(LogRecord::new(bad, "o", l9.ledger_id)),
                    caller: app.clone(),
                    now_ms: 0,
                })
                .0;
            assert!(matches!(o, Outcome::Refused(Refusal::BadRequest(_))), "{bad:?}: {o:?}");
        }
        let o = s
            .apply(Command::CreateLog {
                log: meta(LogRecord::new("l", "o", l9.ledger_id)),
                caller: app.clone(),
                now_ms: 0,
            })
            .0;
        assert!(matches!(o, Outcome::Refused(Refusal::AlreadyExists(_))));
        assert_eq!(s.list_logs("", 10), (vec!["l".to_string()], None));
    }

    fn put(s: &mut MetaState, name: &str, position: u64, holds: bool, expected_version: u64, seek: bool) -> Outcome {
        let cursor = quire_log::Cursor {
            log: "l".into(),
            name: name.into(),
            position,
            holds_retention: holds,
            version: 0,
            updated_at_ms: 0,
        };
        s.apply(Command::PutCursor { cursor, expected_version, seek, now_ms: 7, caller: gw() }).0
    }

    /// Cursors: created once, acknowledged forward by CAS, sought anywhere
    /// the log holds; a holding cursor stops a trim past it; they go with
    /// their log.
    #[test]
    fn cursors_move_by_cas_and_hold_retention() {
        let mut s = MetaState::default();
        let l1 = ledger(&mut s, "gateway/1");
        let log = create(&mut s, "l", l1.ledger_id);
        let l2 = ledger(&mut s, "gateway/1");
        let log =
            stored(update(&mut s, &log, log.record.roll(1, 9, l2.ledger_id).unwrap(), vec![closed(&l1, 9)], &gw()));
        let c = match put(&mut s, "reader", 0, true, 0, false) {
            Outcome::Cursor(c) => c,
            o => panic!("{o:?}"),
        };
        assert_eq!((c.version, c.position, c.updated_at_ms), (1, 0, 7));
        assert!(matches!(
            put(&mut s, "reader", 0, true, 0, false),
            Outcome::Refused(Refusal::VersionConflict { actual: 1 })
        ));
        assert!(matches!(put(&mut s, "reader", 4, true, 1, false), Outcome::Cursor(_)));
        assert!(
            matches!(put(&mut s, "reader", 2, true, 2, false), Outcome::Refused(Refusal::BadRequest(_))),
            "an ack never moves back"
        );
        assert!(matches!(put(&mut s, "reader", 2, true, 2, true), Outcome::Cursor(_)), "a seek may");
        // The holding cursor at 2 stops a trim to 10; a cursor that does not hold, nothing.
        assert!(matches!(put(&mut s, "other", 0, false, 0, false), Outcome::Cursor(_)));
        let (trimmed, _) = log.record.trim(10).unwrap();
        let out = update(&mut s, &log, trimmed.clone(), vec![], &gw());
        assert!(matches!(&out, Outcome::Refused(Refusal::BadRequest(m)) if m.contains("reader")), "{out:?}");
        assert!(matches!(put(&mut s, "reader", 10, true, 3, false), Outcome::Cursor(_)));
        let log = stored(update(&mut s, &log, trimmed, vec![], &gw()));
        assert_eq!(log.record.trim_before, 10);
        assert!(
            matches!(put(&mut s, "other", 5, false, 1, true), Outcome::Refused(Refusal::BadRequest(_))),
            "below the trim point"
        );
        assert!(matches!(put(&mut s, "x/y", 0, false, 0, false), Outcome::Refused(Refusal::BadRequest(_))));
        assert_eq!(s.cursors_of("l").count(), 2);
        // Only who may change the log may hold its retention.
        let intruder = Caller { role: "client".into(), id: "x".into() };
        let c = quire_log::Cursor {
            log: "l".into(),
            name: "hog".into(),
            position: 10,
            holds_retention: true,
            version: 0,
            updated_at_ms: 0,
        };
        let o = s
            .apply(Command::PutCursor {
                cursor: c,
                expected_version: 0,
                seek: false,
                now_ms: 7,
                caller: intruder.clone(),
            })
            .0;
        assert!(matches!(o, Outcome::Refused(Refusal::PermissionDenied(_))), "{o:?}");
        let o = s.apply(Command::DeleteCursor { log: "l".into(), name: "reader".into(), caller: intruder.clone() }).0;
        assert!(matches!(o, Outcome::Refused(Refusal::PermissionDenied(_))), "{o:?}");
        let del = |name: &str| Command::DeleteCursor { log: "l".into(), name: name.into(), caller: intruder.clone() };
        assert_eq!(s.apply(del("other")).0, Outcome::Deleted, "a cursor that holds nothing is any reader's");
        assert!(matches!(s.apply(del("other")).0, Outcome::Refused(Refusal::NotFound(_))));
        // The ownership lock goes with the log.
        s.apply(Command::AcquireLock {
            name: "log/l".into(),
            owner: "gateway/1:a".into(),
            lease_ms: 10_000,
            now_ms: 7,
        });
        assert!(s.locks.contains_key("log/l"));
        s.apply(Command::DeleteLogAndSweep { name: "l".into(), caller: gw() });
        assert!(s.cursors.is_empty(), "cursors go with their log");
        assert!(!s.locks.contains_key("log/l"), "and its ownership lock");
    }
}
