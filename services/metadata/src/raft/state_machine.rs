//! The state machine store: `state::MetaState` in memory, made durable by
//! its snapshot file (`snapshot_file.rs`) and the Raft log after it.
//!
//! Applying changes memory only. openraft purges log entries only once a
//! snapshot covering them is durable (`build_snapshot` returns after the
//! file's fsync and rename), and re-applies the log after the snapshot when
//! a replica opens; so nothing a replica acknowledged depends on state that
//! was never written. How often snapshots are taken: `raft/compaction.rs`.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError, StorageIOError,
    StoredMembership,
};
use quire_durable::SyncedSled;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::snapshot_file::{self, SnapshotDir};
use super::TypeConfig;
use crate::state::{MetaState, Outcome};

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

/// A log's stored value in the sled layout: the record, then its
/// principal (absent from values written before principals: read as none).
#[cfg(test)]
fn log_value(l: &crate::state::Log) -> Result<Vec<u8>, SErr> {
    let w = |e: postcard::Error| -> SErr { StorageIOError::write_state_machine(&e).into() };
    let mut v = postcard::to_stdvec(l).map_err(w)?;
    v.extend(postcard::to_stdvec(&l.principal).map_err(w)?);
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
    write_snapshot(state, Vec::new())
}

/// Writes a snapshot's bytes (`encode_snapshot`'s) to `w` as they are
/// encoded, never all in one buffer.
pub fn write_snapshot<W: std::io::Write>(state: &MetaState, w: W) -> Result<W, postcard::Error> {
    let w = postcard::to_io(state, w)?;
    let extras =
        SnapshotExtras { revoked: state.revoked.values().cloned().collect(), revoked_version: state.revoked_version };
    let w = postcard::to_io(&extras, w)?;
    let logs = SnapshotLogs {
        logs: state.logs.values().cloned().collect(),
        cursors: state.cursors.values().cloned().collect(),
    };
    let w = postcard::to_io(&logs, w)?;
    let principals = SnapshotLogPrincipals {
        principals: state
            .logs
            .values()
            .filter(|l| !l.principal.is_empty())
            .map(|l| (l.record.name.clone(), l.principal.clone()))
            .collect(),
    };
    postcard::to_io(&principals, w)
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

/// A state and the snapshot meta it is at.
type Snapshotted = (MetaState, SnapshotMeta<u64, BasicNode>);

// The sled layout before the snapshot file (read once, by `migrate`).
const OLD_STATE_TREE: &str = "state";
const OLD_SNAPSHOT_TREE: &str = "snapshot";
const OLD_SNAPSHOT_META_KEY: &str = "meta";
const OLD_SNAPSHOT_DATA_KEY: &str = "data";
const OLD_INSTALLING_KEY: &str = "m/installing";

fn unjson<T: serde::de::DeserializeOwned>(v: &[u8]) -> Result<T, SErr> {
    postcard::from_bytes(v).map_err(|e| StorageIOError::read_state_machine(&e).into())
}

fn rerr(e: impl std::error::Error + 'static) -> SErr {
    StorageIOError::read_state_machine(&e).into()
}

fn werr(e: impl std::error::Error + 'static) -> SErr {
    StorageIOError::write_state_machine(&e).into()
}

/// The state and meta a replica kept in sled before the snapshot file,
/// if it has any: its records as last flushed (or, if an install was
/// interrupted, the snapshot that install had stored).
fn old_layout(db: &sled::Db) -> Result<Option<Snapshotted>, SErr> {
    let names = db.tree_names();
    if !names.iter().any(|n| &**n == OLD_STATE_TREE.as_bytes()) {
        return Ok(None);
    }
    let sm = db.open_tree(OLD_STATE_TREE).map_err(rerr)?;
    let snap = db.open_tree(OLD_SNAPSHOT_TREE).map_err(rerr)?;
    if let Some(mark) = sm.get(OLD_INSTALLING_KEY).map_err(rerr)? {
        let meta: SnapshotMeta<u64, BasicNode> = unjson(&mark)?;
        if let (Some(m), Some(d)) =
            (snap.get(OLD_SNAPSHOT_META_KEY).map_err(rerr)?, snap.get(OLD_SNAPSHOT_DATA_KEY).map_err(rerr)?)
        {
            if unjson::<SnapshotMeta<u64, BasicNode>>(&m)? == meta {
                let state = decode_snapshot(&d).map_err(rerr)?;
                return Ok(Some((state, meta)));
            }
        }
    }
    let mut state = MetaState::default();
    for kv in sm.iter() {
        let (k, v) = kv.map_err(rerr)?;
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
    let get = |key: &str| sm.get(key).map_err(rerr);
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
    let last_log_id: Option<LogId<u64>> = match get("m/last_applied")? {
        Some(v) => unjson(&v)?,
        None => None,
    };
    let last_membership = match get("m/membership")? {
        Some(v) => unjson(&v)?,
        None => StoredMembership::default(),
    };
    // No applied index: nothing was ever applied, and the log still holds it all.
    let Some(l) = last_log_id else { return Ok(None) };
    let meta = SnapshotMeta { last_log_id, last_membership, snapshot_id: format!("moved-{}-{}", l.leader_id, l.index) };
    Ok(Some((state, meta)))
}

/// Moves a replica's state from the sled layout before the snapshot file
/// to the file (durably, before the old trees go). Returns what was moved.
fn migrate(db: &sled::Db, synced: &SyncedSled, files: &SnapshotDir) -> Result<Option<Snapshotted>, SErr> {
    let found = old_layout(db)?;
    if let Some((state, meta)) = &found {
        files
            .write_current(meta, |w| write_snapshot(state, w).map(drop).map_err(std::io::Error::other))
            .map_err(werr)?;
        tracing::warn!(last_log = ?meta.last_log_id, ledgers = state.ledgers.len(), "moved the state machine from sled to its snapshot file");
    }
    for name in [OLD_STATE_TREE, OLD_SNAPSHOT_TREE] {
        db.drop_tree(name).map_err(werr)?;
    }
    synced.flush(db).map_err(werr)?;
    Ok(found)
}

/// The state machine store.
pub struct StateMachineStore {
    files: SnapshotDir,
    shared: Arc<Shared>,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    /// The current snapshot's meta, under the lock that replaces its file:
    /// a build that ends after a newer install must not replace what the
    /// install wrote.
    current: Arc<Mutex<Option<SnapshotMeta<u64, BasicNode>>>>,
}

/// Opens the current snapshot file (for openraft to read or send).
fn open_current(files: &SnapshotDir, meta: &SnapshotMeta<u64, BasicNode>) -> Result<Snapshot<TypeConfig>, SErr> {
    let f =
        std::fs::File::open(files.current()).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
    Ok(Snapshot { meta: meta.clone(), snapshot: Box::new(tokio::fs::File::from_std(f)) })
}

impl StateMachineStore {
    /// Opens the state: the snapshot file in `dir`, else whatever an older
    /// version kept in `db` (moved to the file), else an empty state.
    /// openraft then re-applies the log after it.
    pub fn open(db: &sled::Db, synced: &SyncedSled, dir: &Path) -> Result<StateMachineStore, SErr> {
        let files = SnapshotDir::open(dir).map_err(rerr)?;
        let (state, meta) = match files.read_current().map_err(rerr)? {
            Some(bytes) => {
                let (meta, range) = snapshot_file::parse(&files.current(), &bytes).map_err(rerr)?;
                let state = decode_snapshot(&bytes[range])
                    .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
                (state, Some(meta))
            }
            None => match migrate(db, synced, &files)? {
                Some((state, meta)) => (state, Some(meta)),
                None => (MetaState::default(), None),
            },
        };
        let last_applied = meta.as_ref().and_then(|m| m.last_log_id);
        let membership = meta.as_ref().map(|m| m.last_membership.clone()).unwrap_or_default();
        let shared = Arc::new(Shared {
            state: RwLock::new(state),
            applied: watch::Sender::new(last_applied.map_or(0, |l| l.index)),
            snapshots_installed: std::sync::atomic::AtomicU64::new(0),
        });
        Ok(StateMachineStore { files, shared, last_applied, membership, current: Arc::new(Mutex::new(meta)) })
    }

    /// The state shared with the RPC handlers.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId<u64>> {
        self.last_applied
    }
}

/// Builds snapshots from a copy of the state taken when the build was asked for.
pub struct SnapshotBuilder {
    state: MetaState,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    files: SnapshotDir,
    current: Arc<Mutex<Option<SnapshotMeta<u64, BasicNode>>>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, SErr> {
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}", l.leader_id, l.index),
            None => "empty".to_string(),
        };
        let meta =
            SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone(), snapshot_id };
        let state = std::mem::take(&mut self.state);
        let (files, current) = (self.files.clone(), self.current.clone());
        // Encoding a million ledgers takes a second or more: off the runtime.
        tokio::task::spawn_blocking(move || {
            let mut cur = current.lock().expect("snapshot lock");
            if let Some(c) = cur.as_ref().filter(|c| c.last_log_id >= meta.last_log_id) {
                // An install got further meanwhile: its snapshot stays.
                return open_current(&files, c);
            }
            let started = std::time::Instant::now();
            files
                .write_current(&meta, |w| write_snapshot(&state, w).map(drop).map_err(std::io::Error::other))
                .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
            tracing::info!(
                last_log = ?meta.last_log_id,
                ledgers = state.ledgers.len(),
                ms = started.elapsed().as_millis() as u64,
                "wrote a snapshot"
            );
            drop(state);
            *cur = Some(meta.clone());
            open_current(&files, &meta)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &e))?
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
        // In memory only: the snapshot and the log after it are what is durable.
        let mut out = Vec::new();
        let waited = std::time::Instant::now();
        let mut state = self.shared.state.write().expect("state lock");
        let wait_ms = waited.elapsed().as_millis();
        if wait_ms >= 200 {
            tracing::warn!(wait_ms, "applying waited this long for the state's lock");
        }
        for e in entries {
            self.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => out.push(Outcome::Nothing),
                EntryPayload::Normal(cmd) => out.push(state.apply(cmd).0),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(e.log_id), m);
                    out.push(Outcome::Nothing);
                }
            }
        }
        // Under the write lock: a reader holding the read lock sees the
        // state and the index it is at together (the status's digest).
        if let Some(l) = self.last_applied {
            self.shared.applied.send_replace(l.index);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let started = std::time::Instant::now();
        let state = self.shared.state.read().expect("state lock").clone();
        tracing::info!(ms = started.elapsed().as_millis() as u64, "copied the state for a snapshot");
        SnapshotBuilder {
            state,
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            files: self.files.clone(),
            current: self.current.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, SErr> {
        let f = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.files.receiving_path())
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        Ok(Box::new(f))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), SErr> {
        fn werr<E: std::error::Error + 'static>(meta: &SnapshotMeta<u64, BasicNode>, e: &E) -> SErr {
            StorageIOError::write_snapshot(Some(meta.signature()), e).into()
        }
        let mut f = snapshot.into_std().await;
        let (files, current, sent) = (self.files.clone(), self.current.clone(), meta.clone());
        let new_state = tokio::task::spawn_blocking(move || -> Result<MetaState, SErr> {
            use std::io::{Read, Seek};
            let meta = sent;
            let mut bytes = Vec::new();
            f.seek(std::io::SeekFrom::Start(0)).and_then(|_| f.read_to_end(&mut bytes)).map_err(|e| werr(&meta, &e))?;
            drop(f);
            let mut cur = current.lock().expect("snapshot lock");
            // A leader of the version before snapshot files sends the
            // state's bytes alone, without the magic.
            let data = if bytes.starts_with(snapshot_file::MAGIC) {
                let (got, range) =
                    snapshot_file::parse(&files.receiving_path(), &bytes).map_err(|e| werr(&meta, &e))?;
                if got.last_log_id != meta.last_log_id || got.last_membership != meta.last_membership {
                    let e = std::io::Error::other(format!("the snapshot's file is of {got:?}, sent as {meta:?}"));
                    return Err(werr(&meta, &e));
                }
                &bytes[range]
            } else {
                &bytes[..]
            };
            let state = decode_snapshot(data).map_err(|e| werr(&meta, &e))?;
            files.write_current(&meta, |w| w.write_all(data)).map_err(|e| werr(&meta, &e))?;
            *cur = Some(meta);
            Ok(state)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &e))??;
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
        let cur = self.current.lock().expect("snapshot lock");
        cur.as_ref().map(|m| open_current(&self.files, m)).transpose()
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

    fn open(dir: &Path) -> StateMachineStore {
        crate::raft::open_storage(dir).unwrap().1
    }

    fn state_of(sm: &StateMachineStore) -> MetaState {
        sm.shared.state.read().unwrap().clone()
    }

    /// Installs `bytes` as a follower receives them.
    async fn install_bytes(
        sm: &mut StateMachineStore,
        meta: &SnapshotMeta<u64, BasicNode>,
        bytes: &[u8],
    ) -> Result<(), SErr> {
        use tokio::io::AsyncWriteExt;
        let mut f = sm.begin_receiving_snapshot().await?;
        f.write_all(bytes).await.unwrap();
        f.shutdown().await.unwrap();
        sm.install_snapshot(meta, f).await
    }

    fn blank(index: u64) -> Entry<TypeConfig> {
        Entry { log_id: LogId::new(openraft::CommittedLeaderId::new(2, 1), index), payload: EntryPayload::Blank }
    }

    /// What a replica applied is durable once a snapshot covers it: it
    /// opens at that snapshot (openraft re-applies the log after it), and
    /// at nothing applied if there was none.
    #[tokio::test]
    async fn a_replica_opens_at_its_last_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let state = a_state(5);
        {
            let mut sm = open(dir.path());
            install_bytes(
                &mut sm,
                &meta_at(3),
                &snapshot_file::file_bytes(&meta_at(3), &encode_snapshot(&state).unwrap()),
            )
            .await
            .unwrap();
            sm.apply((4..=6).map(blank)).await.unwrap();
            let built = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
            assert_eq!(built.meta.last_log_id, meta_at(6).last_log_id);
            sm.apply((7..=8).map(blank)).await.unwrap();
            assert_eq!(sm.last_applied, meta_at(8).last_log_id);
        }
        let mut sm = open(dir.path());
        assert_eq!((state_of(&sm), sm.last_applied), (state.clone(), meta_at(6).last_log_id));
        let cur = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(cur.meta.last_log_id, meta_at(6).last_log_id);

        let empty = tempfile::tempdir().unwrap();
        let mut sm = open(empty.path());
        assert_eq!(sm.applied_state().await.unwrap().0, None);
        assert!(sm.get_current_snapshot().await.unwrap().is_none());
    }

    /// The file a leader sends is installed whole and checked: a replica
    /// sent a corrupt one refuses it and keeps its state; one sent the
    /// state's bytes alone (a leader of the version before snapshot files)
    /// installs them.
    #[tokio::test]
    async fn an_installed_snapshot_is_checked_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (a_state(3), a_state(2 * 4096 + 10));
        let mut sm = open(dir.path());
        install_bytes(&mut sm, &meta_at(7), &encode_snapshot(&old).unwrap()).await.unwrap();
        assert_eq!((state_of(&sm), sm.last_applied), (old.clone(), meta_at(7).last_log_id));

        let mut file = snapshot_file::file_bytes(&meta_at(9), &encode_snapshot(&new).unwrap());
        let mid = file.len() / 2;
        file[mid] ^= 1;
        let err = install_bytes(&mut sm, &meta_at(9), &file).await.unwrap_err();
        assert!(err.to_string().contains("CRC") || format!("{err:?}").contains("CRC"), "{err:?}");
        assert_eq!((state_of(&sm), sm.last_applied), (old.clone(), meta_at(7).last_log_id));
        file[mid] ^= 1;
        let err = install_bytes(&mut sm, &meta_at(11), &file).await.unwrap_err();
        assert!(format!("{err:?}").contains("sent as"), "a file of another snapshot: {err:?}");
        install_bytes(&mut sm, &meta_at(9), &file).await.unwrap();
        assert_eq!(sm.shared.snapshots_installed.load(std::sync::atomic::Ordering::Relaxed), 2);
        drop(sm);
        let sm = open(dir.path());
        assert_eq!((state_of(&sm) == new, sm.last_applied), (true, meta_at(9).last_log_id));
    }

    /// A build that ends after a newer install leaves the install's file.
    #[tokio::test]
    async fn a_build_older_than_an_install_does_not_replace_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut sm = open(dir.path());
        sm.apply((1..=5).map(blank)).await.unwrap();
        let mut builder = sm.get_snapshot_builder().await;
        let state = a_state(4);
        install_bytes(&mut sm, &meta_at(9), &encode_snapshot(&state).unwrap()).await.unwrap();
        let built = builder.build_snapshot().await.unwrap();
        assert_eq!(built.meta.last_log_id, meta_at(9).last_log_id);
        drop(sm);
        let sm = open(dir.path());
        assert_eq!((state_of(&sm), sm.last_applied), (state, meta_at(9).last_log_id));
    }

    /// A snapshot file damaged on disk stops the replica with an error
    /// naming the file, rather than opening an empty or partial state.
    #[tokio::test]
    async fn a_damaged_snapshot_file_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut sm = open(dir.path());
            install_bytes(&mut sm, &meta_at(3), &encode_snapshot(&a_state(3)).unwrap()).await.unwrap();
        }
        let path = dir.path().join("sm").join("current");
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() - 10;
        bytes[at] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
        let err = crate::raft::open_storage(dir.path()).err().expect("a damaged snapshot is refused");
        let msg = format!("{err:#}");
        assert!(msg.contains("current") && msg.contains("CRC"), "{msg}");
    }

    /// A replica of the version that kept its state record by record in
    /// sled opens with that state, moved to its snapshot file; one whose
    /// install a crash interrupted opens with the snapshot it had stored.
    #[tokio::test]
    async fn a_replica_of_the_sled_layout_moves_its_state_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let state = a_state(6);
        {
            let config = sled::Config::new().path(dir.path()).flush_every_ms(None);
            let db = config.open().unwrap();
            let sm = db.open_tree(OLD_STATE_TREE).unwrap();
            for l in state.ledgers.values() {
                let mut k = b"l/".to_vec();
                k.extend_from_slice(&l.ledger_id.to_be_bytes());
                sm.insert(k, postcard::to_stdvec(&l).unwrap()).unwrap();
            }
            let c = Counters {
                next_ledger_id: state.next_ledger_id,
                next_lease_id: state.next_lease_id,
                bookies_version: state.bookies_version,
                next_lock_id: state.next_lock_id,
                revoked_version: state.revoked_version,
            };
            sm.insert("m/counters", postcard::to_stdvec(&c).unwrap()).unwrap();
            sm.insert("m/last_applied", postcard::to_stdvec(&meta_at(12).last_log_id).unwrap()).unwrap();
            sm.insert("m/membership", postcard::to_stdvec(&StoredMembership::<u64, BasicNode>::default()).unwrap())
                .unwrap();
            db.flush().unwrap();
        }
        {
            let sm = open(dir.path());
            assert_eq!((state_of(&sm), sm.last_applied), (state.clone(), meta_at(12).last_log_id));
        }
        let (log, sm) = crate::raft::open_storage(dir.path()).unwrap();
        assert_eq!((state_of(&sm), sm.last_applied), (state.clone(), meta_at(12).last_log_id));
        drop((log, sm));
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        assert!(!db.tree_names().iter().any(|n| &**n == OLD_STATE_TREE.as_bytes()), "the old records went");
        drop(db);

        // An install interrupted in the sled layout: its mark, its stored snapshot.
        let dir = tempfile::tempdir().unwrap();
        let installed = a_state(9);
        {
            let db = sled::Config::new().path(dir.path()).open().unwrap();
            let sm = db.open_tree(OLD_STATE_TREE).unwrap();
            let snap = db.open_tree(OLD_SNAPSHOT_TREE).unwrap();
            sm.insert(OLD_INSTALLING_KEY, postcard::to_stdvec(&meta_at(20)).unwrap()).unwrap();
            sm.insert("m/last_applied", postcard::to_stdvec(&meta_at(4).last_log_id).unwrap()).unwrap();
            snap.insert(OLD_SNAPSHOT_META_KEY, postcard::to_stdvec(&meta_at(20)).unwrap()).unwrap();
            snap.insert(OLD_SNAPSHOT_DATA_KEY, encode_snapshot(&installed).unwrap()).unwrap();
            db.flush().unwrap();
        }
        let sm = open(dir.path());
        assert_eq!((state_of(&sm), sm.last_applied), (installed, meta_at(20).last_log_id));
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
