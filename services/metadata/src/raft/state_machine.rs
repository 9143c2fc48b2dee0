//! The state machine store: `state::MetaState` in memory, persisted in sled
//! as it changes, with snapshots for log compaction and catch-up.
//!
//! Each batch of applied entries writes the records it touched and the last
//! applied log id in one atomic sled batch, so the persisted state and
//! `last_applied` never disagree. They are flushed lazily: after a crash the
//! store reopens at some earlier `last_applied` and openraft re-applies the
//! log from there. A snapshot is built only from flushed state, so the log it
//! lets openraft purge is never needed again.

use std::io::Cursor;
use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError, StorageIOError,
    StoredMembership,
};
use quire_durable::SyncedSled;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::TypeConfig;
use crate::state::{MetaState, Outcome, Touched};

type SErr = StorageError<u64>;

/// The state shared with the RPC handlers: readers take the lock briefly,
/// watchers wait on `applied` (bumped after every applied batch).
pub struct Shared {
    /// The state as of `applied`.
    pub state: RwLock<MetaState>,
    /// The last applied log index, for watches.
    pub applied: watch::Sender<u64>,
    /// Snapshots received from a leader and installed (a replica too far
    /// behind for the log to catch it up).
    pub snapshots_installed: std::sync::atomic::AtomicU64,
}

#[derive(Serialize, Deserialize)]
struct Counters {
    next_ledger_id: u64,
    next_lease_id: u64,
    bookies_version: u64,
    next_lock_id: u64,
    /// Absent in counters written before the deny list.
    #[serde(default)]
    revoked_version: u64,
}

/// What a snapshot carries after the encoded `MetaState` (fields added
/// since, which `MetaState`'s encoding skips so that older snapshots still
/// decode: postcard ignores bytes after a value, and a snapshot that ends
/// with the state has none of these).
#[derive(Serialize, Deserialize, Default)]
struct SnapshotExtras {
    revoked: Vec<crate::state::Revoked>,
    revoked_version: u64,
}

/// What a snapshot carries after [`SnapshotExtras`]: the logs (issue #23),
/// absent from snapshots written before them.
#[derive(Serialize, Deserialize, Default)]
struct SnapshotLogs {
    logs: Vec<crate::state::Log>,
    cursors: Vec<quire_log::Cursor>,
}

/// What a snapshot carries after [`SnapshotLogs`]: each log's HTTP
/// principal (which `Log`'s encoding skips), absent from snapshots written
/// before it.
#[derive(Serialize, Deserialize, Default)]
struct SnapshotLogPrincipals {
    /// (log name, principal), for the logs that have one.
    principals: Vec<(String, String)>,
}

/// A log's stored value: the record, then its principal (absent from
/// values written before principals: read as none).
fn log_value(l: &crate::state::Log) -> Result<Vec<u8>, SErr> {
    let mut v = json(l)?;
    v.extend(json(&l.principal)?);
    Ok(v)
}

fn log_from_value(v: &[u8]) -> Result<crate::state::Log, SErr> {
    let (mut l, rest): (crate::state::Log, &[u8]) =
        postcard::take_from_bytes(v).map_err(|e| StorageIOError::read_state_machine(&e))?;
    if !rest.is_empty() {
        l.principal = unjson(rest)?;
    }
    Ok(l)
}

/// A snapshot's bytes: the state, then its extras, then the logs, then
/// the logs' principals.
pub fn encode_snapshot(state: &MetaState) -> Result<Vec<u8>, postcard::Error> {
    let mut data = postcard::to_stdvec(state)?;
    let extras =
        SnapshotExtras { revoked: state.revoked.values().cloned().collect(), revoked_version: state.revoked_version };
    data.extend(postcard::to_stdvec(&extras)?);
    let logs = SnapshotLogs {
        logs: state.logs.values().cloned().collect(),
        cursors: state.cursors.values().cloned().collect(),
    };
    data.extend(postcard::to_stdvec(&logs)?);
    let principals = SnapshotLogPrincipals {
        principals: state
            .logs
            .values()
            .filter(|l| !l.principal.is_empty())
            .map(|l| (l.record.name.clone(), l.principal.clone()))
            .collect(),
    };
    data.extend(postcard::to_stdvec(&principals)?);
    Ok(data)
}

/// The state a snapshot holds (from before the deny list and the logs too).
pub fn decode_snapshot(data: &[u8]) -> Result<MetaState, postcard::Error> {
    let (mut state, rest): (MetaState, &[u8]) = postcard::take_from_bytes(data)?;
    let (extras, rest): (SnapshotExtras, &[u8]) =
        if rest.is_empty() { (SnapshotExtras::default(), rest) } else { postcard::take_from_bytes(rest)? };
    let (logs, rest): (SnapshotLogs, &[u8]) =
        if rest.is_empty() { (SnapshotLogs::default(), rest) } else { postcard::take_from_bytes(rest)? };
    let principals: SnapshotLogPrincipals =
        if rest.is_empty() { SnapshotLogPrincipals::default() } else { postcard::from_bytes(rest)? };
    state.revoked = extras.revoked.into_iter().map(|r| (r.serial.clone(), r)).collect();
    state.revoked_version = extras.revoked_version;
    state.logs = logs.logs.into_iter().map(|l| (l.record.name.clone(), l)).collect();
    state.cursors = logs.cursors.into_iter().map(|c| ((c.log.clone(), c.name.clone()), c)).collect();
    for (name, principal) in principals.principals {
        state.logs.set_principal(&name, principal);
    }
    Ok(state)
}

/// How snapshots were stored before their meta and bytes were kept apart
/// (under `OLD_SNAPSHOT_KEY`, still read): one value, copying the bytes once
/// more on every build and install.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, BasicNode>,
    data: Vec<u8>,
}

const OLD_SNAPSHOT_KEY: &str = "current";
/// Set while a snapshot's records are being written (its meta, postcard).
const INSTALLING_KEY: &str = "m/installing";
/// Records per sled batch while a snapshot's state is written.
const INSTALL_BATCH_RECORDS: usize = 4096;

/// Replaces the records in `sm` with `state`'s, then sets the applied log
/// id and membership to `meta`'s and removes the install mark, in batches
/// of [`INSTALL_BATCH_RECORDS`]; not flushed. (sled still holds about
/// 2.3 KB in memory per record so written, flushed or not: 2.3 GB for a
/// million ledgers, docs/benchmarks.md.) Only the last batch makes
/// the records current: until then the mark says they are not.
fn write_installed_state(sm: &sled::Tree, state: &MetaState, meta: &SnapshotMeta<u64, BasicNode>) -> Result<(), SErr> {
    let werr = |e: sled::Error| -> SErr { StorageIOError::write_state_machine(&e).into() };
    let apply = |batch: sled::Batch| sm.apply_batch(batch).map_err(werr);
    let mut batch = sled::Batch::default();
    let mut n = 0;
    for kv in sm.iter() {
        let (k, _) = kv.map_err(werr)?;
        if &*k == INSTALLING_KEY.as_bytes() {
            continue;
        }
        batch.remove(k);
        n += 1;
        if n == INSTALL_BATCH_RECORDS {
            apply(std::mem::take(&mut batch))?;
            n = 0;
        }
    }
    apply(std::mem::take(&mut batch))?;
    let mut touched: Vec<Touched> = Vec::new();
    touched.extend(state.bookies.keys().cloned().map(Touched::Bookie));
    touched.extend(state.cookies.keys().cloned().map(Touched::Cookie));
    touched.extend(state.marks.keys().map(|id| Touched::Mark(*id)));
    touched.extend(state.locks.keys().cloned().map(Touched::Lock));
    touched.extend(state.retirements.keys().cloned().map(Touched::Retirement));
    touched.extend(state.creates.keys().cloned().map(Touched::Create));
    touched.extend(state.revoked.keys().cloned().map(Touched::Revoked));
    touched.extend(state.logs.keys().cloned().map(Touched::Log));
    touched.extend(state.cursors.keys().cloned().map(|(l, c)| Touched::Cursor(l, c)));
    touched.push(Touched::AuditReport);
    touched.push(Touched::Counters);
    let mut ledgers = state.ledgers.ids().map(Touched::Ledger);
    let mut chunk = touched;
    loop {
        chunk.extend(ledgers.by_ref().take(INSTALL_BATCH_RECORDS.saturating_sub(chunk.len()).max(1)));
        if chunk.is_empty() {
            break;
        }
        let mut batch = sled::Batch::default();
        StateMachineStore::persist(state, &chunk, &mut batch)?;
        apply(batch)?;
        chunk = Vec::new();
    }
    let mut batch = sled::Batch::default();
    batch.insert(b"m/last_applied".to_vec(), json(&meta.last_log_id)?);
    batch.insert(b"m/membership".to_vec(), json(&meta.last_membership)?);
    batch.remove(INSTALLING_KEY);
    sm.apply_batch(batch).map_err(werr)?;
    Ok(())
}

/// At open: a snapshot install that a crash interrupted (its mark still in
/// `sm`) is done again from the snapshot it stored first; one whose
/// snapshot never became durable had not touched the records yet, and its
/// mark goes. Flushed.
fn redo_interrupted_install(
    db: &sled::Db,
    synced: &SyncedSled,
    sm: &sled::Tree,
    snap: &sled::Tree,
) -> Result<(), SErr> {
    let rerr = |e: sled::Error| -> SErr { StorageIOError::read_state_machine(&e).into() };
    let Some(mark) = sm.get(INSTALLING_KEY).map_err(rerr)? else { return Ok(()) };
    let meta: SnapshotMeta<u64, BasicNode> = unjson(&mark)?;
    let stored = match (snap.get(SNAPSHOT_META_KEY).map_err(rerr)?, snap.get(SNAPSHOT_DATA_KEY).map_err(rerr)?) {
        (Some(m), Some(d)) if unjson::<SnapshotMeta<u64, BasicNode>>(&m)? == meta => Some(d),
        _ => None,
    };
    match stored {
        Some(data) => {
            let state =
                decode_snapshot(&data).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
            write_installed_state(sm, &state, &meta)?;
            tracing::warn!(last_log = ?meta.last_log_id, "redid a snapshot install that a crash interrupted");
        }
        None => {
            sm.remove(INSTALLING_KEY).map_err(rerr)?;
        }
    }
    synced.flush(db).map_err(|e| StorageIOError::write_state_machine(&e).into())
}

/// The current snapshot's meta (postcard) and bytes, written in one batch.
const SNAPSHOT_META_KEY: &str = "meta";
const SNAPSHOT_DATA_KEY: &str = "data";

/// Stores `data` as the current snapshot (in one atomic batch, replacing
/// any older one); the bytes are copied once, into sled's buffer, which the
/// returned value shares.
fn store_snapshot(snap: &sled::Tree, meta: &SnapshotMeta<u64, BasicNode>, data: Vec<u8>) -> Result<sled::IVec, SErr> {
    let meta_bytes =
        postcard::to_stdvec(meta).map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
    let data = sled::IVec::from(data);
    let mut batch = sled::Batch::default();
    batch.insert(SNAPSHOT_META_KEY, meta_bytes);
    batch.insert(SNAPSHOT_DATA_KEY, data.clone());
    batch.remove(OLD_SNAPSHOT_KEY);
    snap.apply_batch(batch).map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
    Ok(data)
}

/// The state machine store.
pub struct StateMachineStore {
    db: sled::Db,
    synced: Arc<SyncedSled>,
    sm: sled::Tree,
    snap: sled::Tree,
    shared: Arc<Shared>,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
}

fn key_ledger(id: u64) -> Vec<u8> {
    let mut k = b"l/".to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn key_bookie(id: &str) -> Vec<u8> {
    [b"b/".as_slice(), id.as_bytes()].concat()
}

fn key_cookie(id: &str) -> Vec<u8> {
    [b"c/".as_slice(), id.as_bytes()].concat()
}

fn key_mark(id: u64) -> Vec<u8> {
    let mut k = b"u/".to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn key_retirement(id: &str) -> Vec<u8> {
    [b"r/".as_slice(), id.as_bytes()].concat()
}

fn key_revoked(serial: &str) -> Vec<u8> {
    [b"v/".as_slice(), serial.as_bytes()].concat()
}

fn key_create(request_id: &str) -> Vec<u8> {
    [b"q/".as_slice(), request_id.as_bytes()].concat()
}

fn key_log(name: &str) -> Vec<u8> {
    [b"g/".as_slice(), name.as_bytes()].concat()
}

fn key_cursor(log: &str, name: &str) -> Vec<u8> {
    [b"n/".as_slice(), log.as_bytes(), b"\0", name.as_bytes()].concat()
}

fn key_lock(name: &str) -> Vec<u8> {
    [b"k/".as_slice(), name.as_bytes()].concat()
}

fn json<T: Serialize>(v: &T) -> Result<Vec<u8>, SErr> {
    postcard::to_stdvec(v).map_err(|e| StorageIOError::write_state_machine(&e).into())
}

fn unjson<T: serde::de::DeserializeOwned>(v: &[u8]) -> Result<T, SErr> {
    postcard::from_bytes(v).map_err(|e| StorageIOError::read_state_machine(&e).into())
}

impl StateMachineStore {
    /// Opens the state persisted in `db`.
    pub fn open(db: &sled::Db, synced: Arc<SyncedSled>) -> Result<StateMachineStore, SErr> {
        let sm = db.open_tree("state").map_err(|e| StorageIOError::read_state_machine(&e))?;
        let snap = db.open_tree("snapshot").map_err(|e| StorageIOError::read_state_machine(&e))?;
        redo_interrupted_install(db, &synced, &sm, &snap)?;
        let mut state = MetaState::default();
        for kv in sm.iter() {
            let (k, v) = kv.map_err(|e| StorageIOError::read_state_machine(&e))?;
            match k.get(..2) {
                Some(b"l/") => {
                    let l: crate::state::Ledger = unjson(&v)?;
                    state.ledgers.insert(l.ledger_id, l);
                }
                Some(b"b/") => {
                    let b: crate::state::Bookie = unjson(&v)?;
                    state.bookies.insert(b.bookie_id.clone(), b);
                }
                Some(b"c/") => {
                    let id = String::from_utf8_lossy(&k[2..]).into_owned();
                    state.cookies.insert(id, unjson(&v)?);
                }
                Some(b"u/") => {
                    let m: crate::state::Mark = unjson(&v)?;
                    state.marks.insert(m.ledger_id, m);
                }
                Some(b"k/") => {
                    let l: crate::state::Lock = unjson(&v)?;
                    state.locks.insert(l.name.clone(), l);
                }
                Some(b"r/") => {
                    let r: crate::state::Retirement = unjson(&v)?;
                    state.retirements.insert(r.bookie_id.clone(), r);
                }
                Some(b"v/") => {
                    let r: crate::state::Revoked = unjson(&v)?;
                    state.revoked.insert(r.serial.clone(), r);
                }
                Some(b"g/") => {
                    let l = log_from_value(&v)?;
                    state.logs.insert(l.record.name.clone(), l);
                }
                Some(b"n/") => {
                    let c: quire_log::Cursor = unjson(&v)?;
                    state.cursors.insert((c.log.clone(), c.name.clone()), c);
                }
                Some(b"q/") => {
                    let id = String::from_utf8_lossy(&k[2..]).into_owned();
                    state.creates.insert(id, unjson(&v)?);
                }
                _ => {}
            }
        }
        let get = |key: &str| sm.get(key).map_err(|e| StorageIOError::read_state_machine(&e));
        if let Some(v) = get("m/audit")? {
            state.audit_report = v.to_vec();
        }
        if let Some(v) = get("m/counters")? {
            let c: Counters = unjson(&v)?;
            state.next_ledger_id = c.next_ledger_id;
            state.next_lease_id = c.next_lease_id;
            state.bookies_version = c.bookies_version;
            state.next_lock_id = c.next_lock_id;
            state.revoked_version = c.revoked_version;
        }
        let last_applied: Option<LogId<u64>> = match get("m/last_applied")? {
            Some(v) => unjson(&v)?,
            None => None,
        };
        let membership = match get("m/membership")? {
            Some(v) => unjson(&v)?,
            None => StoredMembership::default(),
        };
        let shared = Arc::new(Shared {
            state: RwLock::new(state),
            applied: watch::Sender::new(last_applied.map_or(0, |l| l.index)),
            snapshots_installed: std::sync::atomic::AtomicU64::new(0),
        });
        Ok(StateMachineStore { db: db.clone(), synced, sm, snap, shared, last_applied, membership })
    }

    /// The state shared with the RPC handlers.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    fn persist(state: &MetaState, touched: &[Touched], batch: &mut sled::Batch) -> Result<(), SErr> {
        for t in touched {
            match t {
                Touched::Ledger(id) => match state.ledgers.get(id) {
                    Some(l) => batch.insert(key_ledger(*id), json(&l)?),
                    None => batch.remove(key_ledger(*id)),
                },
                Touched::Bookie(id) => match state.bookies.get(id) {
                    Some(b) => batch.insert(key_bookie(id), json(b)?),
                    None => batch.remove(key_bookie(id)),
                },
                Touched::Cookie(id) => match state.cookies.get(id) {
                    Some(c) => batch.insert(key_cookie(id), json(c)?),
                    None => batch.remove(key_cookie(id)),
                },
                Touched::Mark(id) => match state.marks.get(id) {
                    Some(m) => batch.insert(key_mark(*id), json(m)?),
                    None => batch.remove(key_mark(*id)),
                },
                Touched::Lock(name) => match state.locks.get(name) {
                    Some(l) => batch.insert(key_lock(name), json(l)?),
                    None => batch.remove(key_lock(name)),
                },
                Touched::Retirement(id) => match state.retirements.get(id) {
                    Some(r) => batch.insert(key_retirement(id), json(r)?),
                    None => batch.remove(key_retirement(id)),
                },
                Touched::Create(r) => match state.creates.get(r) {
                    Some(l) => batch.insert(key_create(r), json(l)?),
                    None => batch.remove(key_create(r)),
                },
                Touched::Revoked(s) => match state.revoked.get(s) {
                    Some(r) => batch.insert(key_revoked(s), json(r)?),
                    None => batch.remove(key_revoked(s)),
                },
                Touched::Log(name) => match state.logs.get(name) {
                    Some(l) => batch.insert(key_log(name), log_value(l)?),
                    None => batch.remove(key_log(name)),
                },
                Touched::Cursor(log, name) => match state.cursors.get(&(log.clone(), name.clone())) {
                    Some(c) => batch.insert(key_cursor(log, name), json(c)?),
                    None => batch.remove(key_cursor(log, name)),
                },
                Touched::AuditReport => batch.insert(b"m/audit".to_vec(), state.audit_report.clone()),
                Touched::Counters => batch.insert(
                    b"m/counters".to_vec(),
                    json(&Counters {
                        next_ledger_id: state.next_ledger_id,
                        next_lease_id: state.next_lease_id,
                        bookies_version: state.bookies_version,
                        next_lock_id: state.next_lock_id,
                        revoked_version: state.revoked_version,
                    })?,
                ),
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), SErr> {
        self.synced.flush(&self.db).map_err(|e| StorageIOError::write_state_machine(&e).into())
    }
}

/// Builds snapshots from a copy of the state taken when the build was asked for.
pub struct SnapshotBuilder {
    state: MetaState,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    db: sled::Db,
    synced: Arc<SyncedSled>,
    snap: sled::Tree,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, SErr> {
        let data = encode_snapshot(&self.state).map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, data.len()),
            None => format!("empty-{}", data.len()),
        };
        let meta =
            SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone(), snapshot_id };
        let data = store_snapshot(&self.snap, &meta, data)?;
        // Durable before openraft purges the log it covers (the state too: it
        // was persisted by apply up to last_applied).
        self.synced.flush(&self.db).map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data.to_vec())) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), SErr> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        let mut batch = sled::Batch::default();
        {
            let mut state = self.shared.state.write().expect("state lock");
            for e in entries {
                self.last_applied = Some(e.log_id);
                match e.payload {
                    EntryPayload::Blank => out.push(Outcome::Nothing),
                    EntryPayload::Normal(cmd) => {
                        let (outcome, touched) = state.apply(cmd);
                        Self::persist(&state, &touched, &mut batch)?;
                        out.push(outcome);
                    }
                    EntryPayload::Membership(m) => {
                        self.membership = StoredMembership::new(Some(e.log_id), m);
                        batch.insert(b"m/membership".to_vec(), json(&self.membership)?);
                        out.push(Outcome::Nothing);
                    }
                }
            }
            // Under the write lock: a reader holding the read lock sees the
            // state and the index it is at together (the status's digest).
            if let Some(l) = self.last_applied {
                self.shared.applied.send_replace(l.index);
            }
        }
        batch.insert(b"m/last_applied".to_vec(), json(&self.last_applied)?);
        self.sm.apply_batch(batch).map_err(|e| StorageIOError::write_state_machine(&e))?;
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Flushed now, so the snapshot never covers state a crash could lose.
        if let Err(e) = self.flush() {
            tracing::error!(error = %e, "flushing the state machine before a snapshot failed");
        }
        SnapshotBuilder {
            state: self.shared.state.read().expect("state lock").clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            db: self.db.clone(),
            synced: self.synced.clone(),
            snap: self.snap.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), SErr> {
        let data = snapshot.into_inner();
        let new_state: MetaState =
            decode_snapshot(&data).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        // The mark and the snapshot first, durably: a crash while the
        // records are rewritten (in bounded batches: a million ledgers in
        // one sled batch took 7.9 GB and 30 s, in these 2.6 GB and 12 s)
        // leaves the mark, and the next open redoes the install from the
        // stored snapshot (`redo_interrupted_install`).
        let mark = postcard::to_stdvec(meta).map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        self.sm.insert(INSTALLING_KEY, mark).map_err(|e| StorageIOError::write_state_machine(&e))?;
        drop(store_snapshot(&self.snap, meta, data)?);
        self.flush()?;
        write_installed_state(&self.sm, &new_state, meta)?;
        self.flush()?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        {
            let mut state = self.shared.state.write().expect("state lock");
            *state = new_state;
            if let Some(l) = self.last_applied {
                self.shared.applied.send_replace(l.index);
            }
        }
        self.shared.snapshots_installed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(last_log = ?meta.last_log_id, "installed a snapshot from the leader");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, SErr> {
        let read = |key| self.snap.get(key).map_err(|e| StorageIOError::read_snapshot(None, &e));
        if let (Some(meta), Some(data)) = (read(SNAPSHOT_META_KEY)?, read(SNAPSHOT_DATA_KEY)?) {
            let meta = postcard::from_bytes(&meta).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
            return Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(data.to_vec())) }));
        }
        match read(OLD_SNAPSHOT_KEY)? {
            Some(v) => {
                let s: StoredSnapshot =
                    postcard::from_bytes(&v).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
                Ok(Some(Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a_state(ledgers: u64) -> MetaState {
        let mut state = MetaState::default();
        for i in 0..ledgers {
            let cmd = crate::state::Command::CreateLedger(crate::state::NewLedger {
                ensemble_size: 1,
                write_quorum: 1,
                ack_quorum: 1,
                bookie_ids: vec![format!("b{i}")],
                instance_ids: vec![],
                custom: Default::default(),
                now_ms: i,
            });
            state.apply(cmd);
        }
        state
    }

    fn meta_at(index: u64) -> SnapshotMeta<u64, BasicNode> {
        SnapshotMeta {
            last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(2, 1), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: format!("s{index}"),
        }
    }

    /// A snapshot of more records than one install batch installs whole;
    /// and an install a crash interrupted (its mark and snapshot durable,
    /// the records half rewritten) is done again at the next open, from the
    /// stored snapshot.
    #[tokio::test]
    async fn an_install_a_crash_interrupted_is_redone_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let before = a_state(3);
        let after = a_state(2 * INSTALL_BATCH_RECORDS as u64 + 10);
        {
            let (_log, mut sm) = crate::raft::open_storage(dir.path()).unwrap();
            let data = encode_snapshot(&after).unwrap();
            sm.install_snapshot(&meta_at(7), Box::new(Cursor::new(data))).await.unwrap();
            assert_eq!(*sm.shared.state.read().unwrap(), after);
        }
        let (_log, sm) = crate::raft::open_storage(dir.path()).unwrap();
        assert_eq!((*sm.shared.state.read().unwrap() == after, sm.last_applied), (true, meta_at(7).last_log_id));

        // Interrupted: the mark and the snapshot stored, then only some
        // records rewritten (here: the old ones gone, one of the new).
        let data = encode_snapshot(&before).unwrap();
        sm.sm.insert(INSTALLING_KEY, postcard::to_stdvec(&meta_at(9)).unwrap()).unwrap();
        drop(store_snapshot(&sm.snap, &meta_at(9), data).unwrap());
        for kv in sm.sm.iter() {
            let (k, _) = kv.unwrap();
            if &*k != INSTALLING_KEY.as_bytes() {
                sm.sm.remove(k).unwrap();
            }
        }
        sm.sm.insert(key_ledger(1), json(&before.ledgers.get(&1).unwrap()).unwrap()).unwrap();
        sm.flush().unwrap();
        drop((_log, sm));
        let (_log, sm) = crate::raft::open_storage(dir.path()).unwrap();
        assert_eq!((*sm.shared.state.read().unwrap() == before, sm.last_applied), (true, meta_at(9).last_log_id));
        assert!(sm.sm.get(INSTALLING_KEY).unwrap().is_none(), "the mark goes with the redone install");

        // A mark whose snapshot never became durable: nothing was
        // rewritten yet, the state stands and the mark goes.
        sm.sm.insert(INSTALLING_KEY, postcard::to_stdvec(&meta_at(11)).unwrap()).unwrap();
        sm.flush().unwrap();
        drop((_log, sm));
        let (_log, sm) = crate::raft::open_storage(dir.path()).unwrap();
        assert_eq!((*sm.shared.state.read().unwrap() == before, sm.last_applied), (true, meta_at(9).last_log_id));
        assert!(sm.sm.get(INSTALLING_KEY).unwrap().is_none());
    }

    /// A snapshot stored the old way (meta and bytes in one value) is still
    /// found after an upgrade, and the next one stored replaces it.
    #[tokio::test]
    async fn a_snapshot_stored_before_meta_and_bytes_were_kept_apart_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let (log, mut sm) = crate::raft::open_storage(dir.path()).unwrap();
        drop(log);
        let meta = SnapshotMeta {
            last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(3, 1), 42)),
            last_membership: StoredMembership::default(),
            snapshot_id: "old".into(),
        };
        let old = StoredSnapshot { meta: meta.clone(), data: b"old bytes".to_vec() };
        sm.snap.insert(OLD_SNAPSHOT_KEY, postcard::to_stdvec(&old).unwrap()).unwrap();
        let got = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!((got.meta, got.snapshot.into_inner()), (meta.clone(), b"old bytes".to_vec()));

        let newer = SnapshotMeta { snapshot_id: "new".into(), ..meta };
        drop(store_snapshot(&sm.snap, &newer, b"new bytes".to_vec()).unwrap());
        let got = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!((got.meta, got.snapshot.into_inner()), (newer, b"new bytes".to_vec()));
        assert!(sm.snap.get(OLD_SNAPSHOT_KEY).unwrap().is_none());
    }

    /// A snapshot carries the deny list after the state, and one written
    /// before the deny list existed (the state alone) still installs.
    #[test]
    fn snapshots_carry_the_deny_list_and_older_ones_still_decode() {
        let mut state = MetaState { next_ledger_id: 7, ..MetaState::default() };
        state.apply(crate::state::Command::RevokeCertificate {
            serial: "ab".into(),
            identity: "client/1".into(),
            reason: "leaked".into(),
            undo: false,
            now_ms: 1,
        });
        let log = crate::state::Log {
            created_at_ms: 1,
            version: 2,
            principal: "alice".into(),
            ..crate::logs::test_log("orders", "gateway/1")
        };
        state.logs.insert("orders".into(), log.clone());
        let decoded = decode_snapshot(&encode_snapshot(&state).unwrap()).unwrap();
        assert_eq!(decoded, state);
        assert_eq!(decoded.revoked_version, 1);
        assert_eq!((decoded.logs["orders"].version, decoded.logs["orders"].principal.as_str()), (2, "alice"));
        // A snapshot from before principals (state, deny list, logs) still
        // installs, its logs without one.
        let mut before_principals = postcard::to_stdvec(&state).unwrap();
        before_principals.extend(postcard::to_stdvec(&SnapshotExtras { revoked: vec![], revoked_version: 1 }).unwrap());
        before_principals
            .extend(postcard::to_stdvec(&SnapshotLogs { logs: vec![log.clone()], cursors: vec![] }).unwrap());
        let decoded = decode_snapshot(&before_principals).unwrap();
        assert_eq!((decoded.logs["orders"].version, decoded.logs["orders"].principal.as_str()), (2, ""));
        // So does a stored log value: the record alone reads as no principal.
        assert_eq!(log_from_value(&log_value(&log).unwrap()).unwrap(), log);
        let old_value = postcard::to_stdvec(&log).unwrap();
        assert_eq!(log_from_value(&old_value).unwrap(), crate::state::Log { principal: String::new(), ..log });
        // A snapshot from before the logs (state and deny list) still installs.
        let mut before_logs = postcard::to_stdvec(&state).unwrap();
        before_logs.extend(postcard::to_stdvec(&SnapshotExtras { revoked: vec![], revoked_version: 1 }).unwrap());
        let decoded = decode_snapshot(&before_logs).unwrap();
        assert!(decoded.logs.is_empty() && decoded.revoked_version == 1);
        let old = postcard::to_stdvec(&state).unwrap();
        let decoded = decode_snapshot(&old).unwrap();
        assert_eq!((decoded.next_ledger_id, decoded.revoked.len(), decoded.revoked_version), (7, 0, 0));
        // And a replica of the older version reads the new snapshot's state
        // (postcard ignores what follows a value).
        let new = encode_snapshot(&state).unwrap();
        let read_by_old: MetaState = postcard::from_bytes(&new).unwrap();
        assert_eq!(read_by_old.next_ledger_id, 7);
    }
}
