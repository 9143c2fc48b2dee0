//! The client: ledger operations over the metadata service and the bookies.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quire_metaclient::MetaClient;
use quire_proto::v1;
use quire_rpc::{RpcClient, RpcError};

use crate::meta::{LedgerMeta, LedgerState};
use crate::placement::{choose_ensemble, min_racks_per_write_set, PlacementError};
use crate::shell::bookies::Bookies;
use crate::shell::error::ClientError;
use crate::shell::ledger_writer::LedgerWriter;
use crate::shell::reader::LedgerReader;
use crate::writer::{Member, Quorums, WriterOptions};

/// How the client behaves. Every remote call has a bound.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// An add unanswered this long counts its silent bookies as failed.
    pub add_timeout: Duration,
    /// Adds in flight per writer before `add` waits.
    pub max_pending_adds: usize,
    /// An idle writer publishes its LAC after this long.
    pub explicit_lac_interval: Duration,
    /// Longest a read of one entry may take, retries included.
    pub read_timeout: Duration,
    /// A read unanswered this long is also sent to the next replica.
    pub speculative_read_after: Duration,
    /// A batch read (up to a megabyte of entries from one bookie) unanswered
    /// this long also asks the other replicas. Longer than a single read's
    /// delay: a batch answer takes time in proportion to its size and to the
    /// reader's own requests queued before it, so a busy bookie passes a
    /// single read's delay routinely, and each duplicate then adds a
    /// megabyte of work to replicas that are busy already. At 100 ms a
    /// catch-up read of four ledgers spent most of the machine on duplicates
    /// (1 KiB entries: 70–100 MB/s; at this delay: 236 MB/s).
    pub batch_speculative_read_after: Duration,
    /// Longest an ensemble change, or a creation, may keep trying (no
    /// bookie, no metadata leader).
    pub ensemble_change_deadline: Duration,
    /// Entries recovery reads ahead in parallel.
    pub recovery_read_window: usize,
    /// Largest payload accepted (the bookies' limit should match).
    pub max_entry_bytes: usize,
    /// Racks every write set must span when the cluster has that many
    /// (BookKeeper's minNumRacksPerWriteQuorum); creation fails otherwise.
    pub min_racks_per_write_quorum: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            add_timeout: Duration::from_secs(5),
            max_pending_adds: 4096,
            explicit_lac_interval: Duration::from_millis(100),
            read_timeout: Duration::from_secs(5),
            speculative_read_after: Duration::from_millis(100),
            batch_speculative_read_after: Duration::from_secs(1),
            ensemble_change_deadline: Duration::from_secs(15),
            recovery_read_window: 16,
            max_entry_bytes: 4 << 20,
            min_racks_per_write_quorum: 2,
        }
    }
}

impl ClientOptions {
    pub(crate) fn writer_options(&self, recovery: bool) -> WriterOptions {
        WriterOptions {
            max_pending: self.max_pending_adds,
            add_timeout: self.add_timeout,
            explicit_lac_interval: self.explicit_lac_interval,
            recovery,
            visible_acks: false,
        }
    }
}

/// What to create.
#[derive(Debug, Clone)]
pub struct CreateLedger {
    /// E.
    pub ensemble: usize,
    /// Qw.
    pub write_quorum: usize,
    /// Qa.
    pub ack_quorum: usize,
    /// Application metadata.
    pub custom: BTreeMap<String, Bytes>,
    /// Read your writes: the writer answers an add only once a reader that
    /// starts then sees it (its LAC stored on Qa bookies; issue #47). A
    /// log's ledgers are made so.
    pub visible_acks: bool,
}

impl Default for CreateLedger {
    fn default() -> Self {
        CreateLedger { ensemble: 3, write_quorum: 3, ack_quorum: 2, custom: BTreeMap::new(), visible_acks: false }
    }
}

pub(crate) struct Inner {
    pub(crate) bookies: Arc<Bookies>,
    pub(crate) opts: ClientOptions,
    seed: AtomicU64,
    /// Copies of acknowledged entries this client's writers sent and no
    /// member confirmed.
    lost_copies: AtomicU64,
    /// Add requests this client's writers sent to bookies (each an AddEntry
    /// or an AddEntries), and the copies they carried.
    add_requests: AtomicU64,
    add_copies: AtomicU64,
}

/// A handle on the cluster; cheap to clone.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl Client {
    /// A client calling bookies with `rpc` and the metadata service with `meta`.
    pub fn new(rpc: RpcClient, meta: Arc<MetaClient>, opts: ClientOptions) -> Client {
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Client {
            inner: Arc::new(Inner {
                bookies: Arc::new(Bookies::new(rpc, meta)),
                opts,
                seed: AtomicU64::new(seed),
                lost_copies: AtomicU64::new(0),
                add_requests: AtomicU64::new(0),
                add_copies: AtomicU64::new(0),
            }),
        }
    }

    /// The options.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.opts
    }

    /// The bookie directory.
    pub fn bookies(&self) -> &Arc<Bookies> {
        &self.inner.bookies
    }

    /// The metadata client.
    pub fn meta(&self) -> &Arc<MetaClient> {
        self.inner.bookies.meta()
    }

    /// Copies of acknowledged entries that this client's writers sent and
    /// no write-set member confirmed, since it started (each ledger is
    /// marked under-replicated with those bookies: GET /v1/cluster).
    pub fn lost_copies(&self) -> u64 {
        self.inner.lost_copies.load(Ordering::Relaxed)
    }

    pub(crate) fn count_lost_copy(&self) {
        self.inner.lost_copies.fetch_add(1, Ordering::Relaxed);
    }

    /// Add requests this client's writers sent to bookies, and the entry
    /// copies they carried, since it started: their ratio is how well the
    /// writers batch (an AddEntries carries what was queued together).
    pub fn add_requests(&self) -> (u64, u64) {
        (self.inner.add_requests.load(Ordering::Relaxed), self.inner.add_copies.load(Ordering::Relaxed))
    }

    pub(crate) fn count_add_request(&self, copies: usize) {
        self.inner.add_requests.fetch_add(1, Ordering::Relaxed);
        self.inner.add_copies.fetch_add(copies as u64, Ordering::Relaxed);
    }

    pub(crate) fn next_seed(&self) -> u64 {
        self.inner.seed.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
    }

    /// Creates a ledger on exactly these bookies (in stripe order), bypassing
    /// placement: for sanity checks of one bookie and for tests. Each must be
    /// registered and writable.
    pub async fn create_on(&self, bookie_ids: Vec<String>, spec: CreateLedger) -> Result<LedgerWriter, ClientError> {
        let q = Quorums::new(bookie_ids.len(), spec.write_quorum, spec.ack_quorum).ok_or_else(|| {
            ClientError::BadRequest(format!(
                "quorums must satisfy 1 <= ack ({}) <= write ({}) <= ensemble ({})",
                spec.ack_quorum,
                spec.write_quorum,
                bookie_ids.len()
            ))
        })?;
        let candidates = self.inner.bookies.candidates().await?;
        let mut members = Vec::with_capacity(bookie_ids.len());
        for id in &bookie_ids {
            let c = candidates
                .iter()
                .find(|c| &c.bookie_id == id && c.writable)
                .ok_or_else(|| ClientError::NotEnoughBookies(format!("bookie {id} is not registered and writable")))?;
            members.push(Member { bookie_id: id.clone(), instance_id: c.instance_id.clone() });
        }
        self.create_with(q, members, spec.custom, spec.visible_acks).await
    }

    async fn create_with(
        &self,
        q: Quorums,
        members: Vec<Member>,
        custom: BTreeMap<String, Bytes>,
        visible_acks: bool,
    ) -> Result<LedgerWriter, ClientError> {
        // One request id for every attempt: an attempt whose outcome is
        // unknown (the leader died with it) is sent again, and answers the
        // ledger it created if it did (issue #19 item 7).
        let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let request_id = format!("{:x}-{:x}-{:x}", std::process::id(), now_ns as u64, self.next_seed());
        let req = v1::CreateLedgerRequest {
            ensemble_size: q.ensemble as u32,
            write_quorum: q.write as u32,
            ack_quorum: q.ack as u32,
            bookie_ids: members.iter().map(|m| m.bookie_id.clone()).collect(),
            instance_ids: members.iter().map(|m| m.instance_id.clone()).collect(),
            custom: custom.into_iter().collect(),
            request_id,
        };
        let deadline = tokio::time::Instant::now() + self.inner.opts.ensemble_change_deadline;
        let created = loop {
            match self.meta().call(req.clone()).await {
                Ok(c) => break c,
                Err(e @ (RpcError::Timeout { .. } | RpcError::ConnectionLost { .. }))
                    if tokio::time::Instant::now() < deadline =>
                {
                    tracing::debug!(error = %e, "creation of unknown outcome; asking again");
                }
                Err(e) => return Err(ClientError::from_metadata(e, None)),
            }
        };
        let meta = LedgerMeta::from_proto(created.ledger.ok_or_else(|| missing_ledger(None))?)?;
        tracing::info!(ledger_id = meta.ledger_id, ensemble = ?members.iter().map(|m| &m.bookie_id).collect::<Vec<_>>(), "created ledger");
        Ok(LedgerWriter::spawn(self.clone(), meta, visible_acks))
    }

    /// Creates a ledger on an ensemble spread over racks, and returns its writer.
    pub async fn create(&self, spec: CreateLedger) -> Result<LedgerWriter, ClientError> {
        let q = Quorums::new(spec.ensemble, spec.write_quorum, spec.ack_quorum).ok_or_else(|| {
            ClientError::BadRequest(format!(
                "quorums must satisfy 1 <= ack ({}) <= write ({}) <= ensemble ({})",
                spec.ack_quorum, spec.write_quorum, spec.ensemble
            ))
        })?;
        let candidates = self.inner.bookies.candidates().await?;
        let ids = choose_ensemble(&candidates, q.ensemble, q.write, self.next_seed()).map_err(|e| match e {
            PlacementError::NotEnoughBookies { .. } => ClientError::NotEnoughBookies(e.to_string()),
        })?;
        // Every write set spans at least min(min_racks_per_write_quorum, racks
        // with writable bookies) racks, or the ledger is not created.
        let rack_of =
            |id: &String| candidates.iter().find(|c| &c.bookie_id == id).map(|c| c.rack.clone()).unwrap_or_default();
        let racks: Vec<String> = ids.iter().map(rack_of).collect();
        let live_racks = candidates
            .iter()
            .filter(|c| c.writable)
            .map(|c| c.rack.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let needed = self.inner.opts.min_racks_per_write_quorum.min(live_racks).min(q.write);
        let got = min_racks_per_write_set(&racks, q.write);
        if got < needed {
            return Err(ClientError::NotEnoughBookies(format!(
                "an ensemble of {} whose write sets span {needed} racks each cannot be placed (best: {got})",
                q.ensemble
            )));
        }
        let members: Vec<Member> = ids
            .iter()
            .map(|id| Member {
                bookie_id: id.clone(),
                instance_id: candidates
                    .iter()
                    .find(|c| &c.bookie_id == id)
                    .map(|c| c.instance_id.clone())
                    .unwrap_or_default(),
            })
            .collect();
        self.create_with(q, members, spec.custom, spec.visible_acks).await
    }

    /// The ledger's metadata, as the metadata leader has it.
    pub async fn metadata(&self, ledger_id: u64) -> Result<LedgerMeta, ClientError> {
        let r = self
            .meta()
            .call(v1::GetLedgerRequest { ledger_id, stale_ok: false })
            .await
            .map_err(|e| ClientError::from_metadata(e, Some(ledger_id)))?;
        Ok(LedgerMeta::from_proto(r.ledger.ok_or_else(|| missing_ledger(Some(ledger_id)))?)?)
    }

    /// Opens a ledger for reading without recovery: an open ledger can be
    /// read up to its LAC while its writer goes on.
    pub async fn open(&self, ledger_id: u64) -> Result<LedgerReader, ClientError> {
        let meta = self.metadata(ledger_id).await?;
        Ok(LedgerReader::new(self.clone(), meta))
    }

    /// Opens a ledger with recovery: fences it, recovers it to its true tail
    /// and closes it there (idempotent on a closed ledger).
    pub async fn open_recovered(&self, ledger_id: u64) -> Result<LedgerReader, ClientError> {
        let meta = self.recover(ledger_id).await?;
        Ok(LedgerReader::new(self.clone(), meta))
    }

    /// Recovers a ledger (see [`crate::recovery`]); returns its closed metadata.
    pub async fn recover(&self, ledger_id: u64) -> Result<LedgerMeta, ClientError> {
        Ok(self.recover_observed(ledger_id).await?.meta)
    }

    /// Recovers a ledger, and says when its fence took hold (for a caller
    /// that reports recovery's phases or judges guarantee 3 from the fence).
    pub async fn recover_observed(&self, ledger_id: u64) -> Result<crate::Recovered, ClientError> {
        crate::shell::recover::recover(self, ledger_id).await
    }

    /// Deletes a ledger's metadata; bookies reclaim its space by GC.
    pub async fn delete(&self, ledger_id: u64) -> Result<(), ClientError> {
        self.meta()
            .call(v1::DeleteLedgerRequest { ledger_id })
            .await
            .map_err(|e| ClientError::from_metadata(e, Some(ledger_id)))?;
        Ok(())
    }

    /// Ledger ids after `start_after`, at most `limit`, and where the next page starts.
    pub async fn list(&self, start_after: Option<u64>, limit: u32) -> Result<(Vec<u64>, Option<u64>), ClientError> {
        let r = self
            .meta()
            .call(v1::ListLedgersRequest { start_after, limit })
            .await
            .map_err(|e| ClientError::from_metadata(e, None))?;
        Ok((r.ledger_ids, r.next))
    }

    /// Every ledger id, page by page.
    pub async fn list_all(&self) -> Result<Vec<u64>, ClientError> {
        let mut out = Vec::new();
        let mut start_after = None;
        loop {
            let (ids, next) = self.list(start_after, 1000).await?;
            out.extend(ids);
            match next {
                Some(n) => start_after = Some(n),
                None => return Ok(out),
            }
        }
    }

    /// Every under-replication mark, page by page.
    pub async fn under_replicated(&self) -> Result<Vec<v1::UnderReplicatedMark>, ClientError> {
        let mut out = Vec::new();
        let mut start_after = None;
        loop {
            let page = self
                .meta()
                .call(v1::ListUnderReplicatedRequest { start_after, limit: 1000 })
                .await
                .map_err(|e| ClientError::from_metadata(e, None))?;
            out.extend(page.marks);
            match page.next {
                Some(n) => start_after = Some(n),
                None => return Ok(out),
            }
        }
    }

    /// Writes `intended` over `current` by CAS. An unknown outcome (timeout,
    /// lost connection) or a conflict is settled by reading the record back:
    /// `Ok` with the stored record when it shows the intended change, else
    /// `Err(stored)` for the caller to judge.
    pub(crate) async fn cas(
        &self,
        current: &LedgerMeta,
        intended: &LedgerMeta,
    ) -> Result<Result<LedgerMeta, LedgerMeta>, ClientError> {
        let ledger_id = current.ledger_id;
        let req = v1::UpdateLedgerRequest { ledger: Some(intended.to_proto()), expected_version: current.version };
        match self.meta().call(req).await {
            Ok(r) => Ok(Ok(LedgerMeta::from_proto(r.ledger.ok_or_else(|| missing_ledger(Some(ledger_id)))?)?)),
            Err(e) => {
                let unknown = matches!(e, RpcError::Timeout { .. } | RpcError::ConnectionLost { .. });
                if e.code() != Some(v1::ErrorCode::VersionConflict) && !unknown {
                    return Err(ClientError::from_metadata(e, Some(ledger_id)));
                }
                let stored = self.metadata(ledger_id).await?;
                let applied = stored.version > current.version
                    && stored.state == intended.state
                    && stored.segments == intended.segments
                    && stored.last_entry_id == intended.last_entry_id
                    && (intended.state != LedgerState::Closed || stored.length == intended.length);
                Ok(if applied { Ok(stored) } else { Err(stored) })
            }
        }
    }
}

pub(crate) fn missing_ledger(ledger_id: Option<u64>) -> ClientError {
    ClientError::MetadataUnavailable(format!("metadata answer without a ledger ({ledger_id:?})"))
}
