//! The Raft log and vote in sled.
//!
//! Entries are postcard-encoded under their index (big-endian, so sled's order is the log's
//! order). The vote, the last purged log id and the committed log id live in a
//! second tree. Every write that openraft must find after a crash (appended
//! entries, the vote, purge and truncation marks) is flushed and fsynced
//! (`SyncedSled`: sled's own flush is not durable) before it is acknowledged;
//! after a failed sync every later one fails, so nothing more is acknowledged.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use quire_durable::SyncedSled;

use super::TypeConfig;

type SErr = StorageError<u64>;

/// The log store; clones share the same trees.
#[derive(Clone)]
pub struct LogStore {
    db: sled::Db,
    synced: Arc<SyncedSled>,
    logs: sled::Tree,
    meta: sled::Tree,
    /// The first index above the purge mark: entries below it may still be
    /// in `logs` while a purge removes them, and are never read.
    first_kept: Arc<std::sync::atomic::AtomicU64>,
    /// The latest background removal of purged entries: it holds the
    /// database open while it runs, so whatever reopens this directory in
    /// the same process (a test) waits for it first.
    purging: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl LogStore {
    /// Opens the log in `db`.
    pub fn open(db: &sled::Db, synced: Arc<SyncedSled>) -> Result<LogStore, sled::Error> {
        let meta = db.open_tree("raft_meta")?;
        let first_kept = match meta.get("last_purged")? {
            Some(v) => postcard::from_bytes::<LogId<u64>>(&v)
                .map_err(|e| sled::Error::Unsupported(format!("the purge mark: {e}")))?
                .index
                .saturating_add(1),
            None => 0,
        };
        Ok(LogStore {
            db: db.clone(),
            synced,
            logs: db.open_tree("raft_log")?,
            meta,
            first_kept: Arc::new(std::sync::atomic::AtomicU64::new(first_kept)),
            purging: Arc::default(),
        })
    }

    /// Waits for the latest background removal of purged entries.
    #[cfg(test)]
    pub(crate) async fn purged(&self) {
        let handle = self.purging.lock().expect("purging lock").take();
        if let Some(h) = handle {
            h.await.expect("the purge's removal task");
        }
    }

    fn get_meta<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, SErr> {
        match self.meta.get(key).map_err(|e| StorageIOError::read(&e))? {
            Some(v) => Ok(Some(postcard::from_bytes(&v).map_err(|e| StorageIOError::read(&e))?)),
            None => Ok(None),
        }
    }

    async fn put_meta<T: serde::Serialize>(&self, key: &str, v: &T) -> Result<(), SErr> {
        let bytes = postcard::to_stdvec(v).map_err(|e| StorageIOError::write(&e))?;
        self.meta.insert(key, bytes).map_err(|e| StorageIOError::write(&e))?;
        self.flush().await.map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    async fn flush(&self) -> Result<(), std::io::Error> {
        let (db, synced) = (self.db.clone(), self.synced.clone());
        tokio::task::spawn_blocking(move || synced.flush(&db).map_err(std::io::Error::other))
            .await
            .map_err(std::io::Error::other)?
    }
}

impl LogStore {
    /// Whether this replica still owes what it lost (`amnesia.rs`): set,
    /// durably, when it starts with no log and no vote, cleared once it
    /// votes again; a restart in between must not make it look intact
    /// (it has a vote by then).
    pub fn amnesia_marked(&self) -> Result<bool, SErr> {
        Ok(self.meta.get(AMNESIA_KEY).map_err(|e| StorageIOError::read(&e))?.is_some())
    }

    /// Sets or clears the mark, durably.
    pub async fn set_amnesia_mark(&self, marked: bool) -> Result<(), SErr> {
        if marked {
            self.meta.insert(AMNESIA_KEY, &[][..]).map_err(|e| StorageIOError::write(&e))?;
        } else {
            self.meta.remove(AMNESIA_KEY).map_err(|e| StorageIOError::write(&e))?;
        }
        self.flush().await.map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }
}

const AMNESIA_KEY: &str = "amnesia";

/// Entries removed per sled batch by a purge.
const PURGE_BATCH_ENTRIES: usize = 1024;

/// A sync of the log this slow is logged (every write waits for it).
const SLOW_SYNC_MS: u128 = 200;

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, SErr> {
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => *x + 1,
            Bound::Unbounded => 0,
        }
        .max(self.first_kept.load(std::sync::atomic::Ordering::Acquire));
        let mut out = Vec::new();
        for kv in self.logs.range(start.to_be_bytes()..) {
            let (k, v) = kv.map_err(|e| StorageIOError::read_logs(&e))?;
            let idx = u64::from_be_bytes(<[u8; 8]>::try_from(&*k).map_err(|e| StorageIOError::read_logs(&e))?);
            if !range.contains(&idx) {
                break;
            }
            out.push(postcard::from_bytes(&v).map_err(|e| StorageIOError::read_logs(&e))?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, SErr> {
        let last_purged: Option<LogId<u64>> = self.get_meta("last_purged")?;
        let last = match self.logs.last().map_err(|e| StorageIOError::read_logs(&e))? {
            Some((_, v)) => {
                let e: Entry<TypeConfig> = postcard::from_bytes(&v).map_err(|e| StorageIOError::read_logs(&e))?;
                // Entries a purge has yet to remove may all lie below its mark.
                Some(e.log_id).max(last_purged)
            }
            None => last_purged,
        };
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), SErr> {
        self.put_meta("vote", vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, SErr> {
        self.get_meta("vote")
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), SErr> {
        // Not flushed: losing it only means re-learning the commit index from the leader.
        let bytes = postcard::to_stdvec(&committed).map_err(|e| StorageIOError::write(&e))?;
        self.meta.insert("committed", bytes).map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, SErr> {
        Ok(self.get_meta::<Option<LogId<u64>>>("committed")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = std::time::Instant::now();
        let mut batch = sled::Batch::default();
        for e in entries {
            let bytes = postcard::to_stdvec(&e).map_err(|x| StorageIOError::write_logs(&x))?;
            batch.insert(&e.log_id.index.to_be_bytes(), bytes);
        }
        self.logs.apply_batch(batch).map_err(|e| StorageIOError::write_logs(&e))?;
        let written_ms = started.elapsed().as_millis();
        // Acknowledged to openraft only once durable.
        let synced = self.flush().await;
        let ms = started.elapsed().as_millis();
        if ms >= SLOW_SYNC_MS {
            tracing::warn!(ms, written_ms, "the Raft log's append was slow: every write waited for it");
        }
        callback.log_io_completed(synced);
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), SErr> {
        let mut batch = sled::Batch::default();
        for kv in self.logs.range(log_id.index.to_be_bytes()..) {
            let (k, _) = kv.map_err(|e| StorageIOError::write_logs(&e))?;
            batch.remove(k);
        }
        self.logs.apply_batch(batch).map_err(|e| StorageIOError::write_logs(&e))?;
        self.flush().await.map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), SErr> {
        // The mark first: a crash between the two leaves the log claiming less than it has, never more.
        self.put_meta("last_purged", &log_id).await?;
        self.first_kept.fetch_max(log_id.index.saturating_add(1), std::sync::atomic::Ordering::AcqRel);
        // The entries go in the background, in sled batches of
        // `PURGE_BATCH_ENTRIES`: a purge behind a snapshot of a million
        // ledgers removes 100 000 entries (`compaction.rs`), which took
        // 200 ms and more, and every append waited (the log's I/O is
        // sequential). Nothing reads below the mark, appends and truncations
        // are above it, and entries a crash leaves below it are removed by
        // the next purge (its range starts at the log's start): the mark is
        // what says where the log begins.
        let logs = self.logs.clone();
        let removal = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let (mut batch, mut n, mut total) = (sled::Batch::default(), 0, 0u64);
            for kv in logs.range(..=log_id.index.to_be_bytes()) {
                let Ok((k, _)) = kv else { break };
                batch.remove(k);
                (n, total) = (n + 1, total + 1);
                if n == PURGE_BATCH_ENTRIES {
                    if let Err(e) = logs.apply_batch(std::mem::take(&mut batch)) {
                        tracing::warn!(error = %e, "removing purged log entries (the next purge goes on)");
                        return;
                    }
                    n = 0;
                }
            }
            if let Err(e) = logs.apply_batch(batch) {
                tracing::warn!(error = %e, "removing purged log entries (the next purge goes on)");
                return;
            }
            tracing::info!(
                upto = log_id.index,
                entries = total,
                ms = started.elapsed().as_millis() as u64,
                "purged the log behind a snapshot"
            );
        });
        *self.purging.lock().expect("purging lock") = Some(removal);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn log_id(index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn blank(index: u64) -> Entry<TypeConfig> {
        Entry { log_id: log_id(index), payload: EntryPayload::Blank }
    }

    /// A purge removes its entries in the background, and a crash can
    /// leave some below the mark: they are never read, and the log state
    /// is the mark's, even when the mark is past the last entry (a purge
    /// behind an installed snapshot).
    #[tokio::test]
    async fn entries_left_below_the_purge_mark_are_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _sm) = crate::raft::open_storage(dir.path()).unwrap();
        log.blocking_append((1..=10).map(blank)).await.unwrap();
        log.purge(log_id(20)).await.unwrap();
        // Once the background removal is done (it holds the database, and
        // would race the entries put back below): what a crash before it
        // would have left.
        log.purged().await;
        for i in [3u64, 10] {
            log.logs.insert(i.to_be_bytes(), postcard::to_stdvec(&blank(i)).unwrap()).unwrap();
        }
        let st = log.get_log_state().await.unwrap();
        assert_eq!((st.last_purged_log_id, st.last_log_id), (Some(log_id(20)), Some(log_id(20))));
        assert!(log.try_get_log_entries(0..).await.unwrap().is_empty());
        drop((log, _sm));
        // And after a reopen, which reads the mark again.
        let (mut log, _sm) = crate::raft::open_storage(dir.path()).unwrap();
        log.logs.insert(5u64.to_be_bytes(), postcard::to_stdvec(&blank(5)).unwrap()).unwrap();
        assert!(log.try_get_log_entries(0..=30).await.unwrap().is_empty());
        log.blocking_append((21..=22).map(blank)).await.unwrap();
        let got: Vec<u64> = log.try_get_log_entries(..).await.unwrap().iter().map(|e| e.log_id.index).collect();
        assert_eq!(got, vec![21, 22]);
    }
}
