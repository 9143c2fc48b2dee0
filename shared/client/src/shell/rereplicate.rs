//! Re-replication: restores the copies a ledger lacks on some bookies (the
//! replication worker's work; BookKeeper's ReplicationWorker).
//!
//! For each bookie named missing, its repairable fragments
//! ([`crate::fragments`]) are repaired one at a time:
//! - the bookie is registered and not draining (a hole, or a corrupt copy):
//!   it asks the bookie which of the fragment's entries it cannot serve, and
//!   copies those back to it in place; the metadata does not change. If it
//!   answers as another instance than the fragment names (replaced at its
//!   address before its predecessor's registration ran out), it is gone for
//!   this fragment, as below;
//! - it is gone or being decommissioned: a replacement is chosen by the
//!   placement policy, every entry of the fragment is copied to it, the
//!   ledger is fenced there when closed, and only then is the member replaced
//!   in the metadata by compare-and-set.
//!
//! Every copy is an entry read from another replica, its CRC and identity
//! checked, and stored unchanged (a replication add). Nothing is recorded
//! before its copies are durable, so a worker that dies mid-copy leaves only
//! unreferenced copies (reclaimed by GC) and the mark, which another worker
//! then finishes. A bookie is reported repaired only when all of its
//! fragments are; one that is still in an open ledger's last segment waits
//! for the writer (or, after a grace period, recovery: the worker's call).

use std::collections::BTreeSet;

use quire_proto::v1::{self, Entry, ErrorCode};
use quire_rpc::RpcError;

use crate::fragments::{repairable, with_member_replaced, Fragment};
use crate::meta::{LedgerMeta, LedgerState, Segment};
use crate::placement::choose_replacement;
use crate::read_plan;
use crate::shell::client::Client;
use crate::shell::error::ClientError;
use crate::shell::scan::gather;
use crate::shell::throttle::Throttle;
use crate::writer::Member;

/// Entries per replication request (and per CheckEntries chunk, at most 4096).
const COPY_BATCH_ENTRIES: usize = 128;
/// Bytes per replication request, at most (a frame must carry it).
const COPY_BATCH_BYTES: usize = 4 << 20;
/// Entry ids per CheckEntries request.
const CHECK_BATCH_ENTRIES: usize = 4096;

/// How one ledger's repair went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repair {
    /// Bookies none of whose copies are missing any more (clear them from the mark).
    pub repaired: Vec<String>,
    /// Bookies still in the writer's last segment of an open ledger.
    pub waiting_for_writer: Vec<String>,
    /// Bookies whose repair failed, and why (the mark stays; retried later).
    pub failed: Vec<(String, String)>,
    /// Entries copied.
    pub entries_copied: u64,
    /// Payload bytes copied.
    pub bytes_copied: u64,
}

/// What filling a fragment in place came to.
enum Filled {
    /// Its bookie holds every entry of it now.
    Done,
    /// Its bookie is not the instance the fragment names: the fragment must move.
    NotHere,
}

impl Client {
    /// Restores the copies `ledger_id` lacks on `missing` (see the module
    /// docs). `keep_going` is asked between batches; when it says no (the
    /// worker lost its claim on the ledger), the repair stops where it is.
    pub async fn rereplicate(
        &self,
        ledger_id: u64,
        missing: &[String],
        throttle: &Throttle,
        keep_going: &(dyn Fn() -> bool + Sync),
    ) -> Result<Repair, ClientError> {
        let mut report = Repair::default();
        let registry = self.bookies().refresh().await?;
        for bookie_id in missing {
            let meta = self.metadata(ledger_id).await?;
            // Filled in place only by the instance the fragment names, and
            // only while it takes writes; a read-only, draining, lost or
            // re-imaged bookie is replaced instead.
            let available_as = registry
                .iter()
                .find(|b| b.bookie_id == *bookie_id && b.state == v1::BookieState::Available as i32)
                .map(|b| b.instance_id.clone());
            let (fragments, in_writers_segment) = repairable(&meta, bookie_id);
            let mut failed = None;
            for f in &fragments {
                if !keep_going() {
                    return Err(ClientError::Timeout("the claim on the ledger was lost".into()));
                }
                let in_place = available_as
                    .as_ref()
                    .is_some_and(|i| f.member.instance_id.is_empty() || *i == f.member.instance_id);
                let filled = match in_place {
                    true => self.fill_holes(&meta, f, throttle, keep_going, &mut report).await,
                    false => Ok(Filled::NotHere),
                };
                let done = match filled {
                    Ok(Filled::Done) => Ok(()),
                    Ok(Filled::NotHere) => self.move_fragment(ledger_id, f, throttle, keep_going, &mut report).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = done {
                    tracing::warn!(ledger_id, bookie_id, segment = f.segment, error = %e, "fragment not repaired");
                    failed = Some(e.to_string());
                    break;
                }
            }
            match failed {
                Some(why) => report.failed.push((bookie_id.clone(), why)),
                None if in_writers_segment => report.waiting_for_writer.push(bookie_id.clone()),
                None => report.repaired.push(bookie_id.clone()),
            }
        }
        Ok(report)
    }

    /// Copies back, in place, the entries of `f` its bookie cannot serve.
    async fn fill_holes(
        &self,
        meta: &LedgerMeta,
        f: &Fragment,
        throttle: &Throttle,
        keep_going: &(dyn Fn() -> bool + Sync),
        report: &mut Repair,
    ) -> Result<Filled, ClientError> {
        let ids: Vec<u64> = f.entries(&meta.quorums).collect();
        let mut bad = Vec::new();
        for chunk in ids.chunks(CHECK_BATCH_ENTRIES) {
            let (missing, corrupt, instance) = self
                .bookies()
                .check_entries(&f.member.bookie_id, meta.ledger_id, chunk.to_vec(), self.options().read_timeout * 4)
                .await
                .map_err(ClientError::Rpc)?;
            if !f.member.instance_id.is_empty() && instance != f.member.instance_id {
                // Another instance (new disks, seed 003): it holds none of this
                // fragment, and filling it in place would pass it off as the
                // old one. The registry may still name the old instance (its
                // lease has not run out): the process that answers decides.
                tracing::info!(
                    ledger_id = meta.ledger_id,
                    bookie_id = %f.member.bookie_id,
                    answers_as = %instance,
                    named = %f.member.instance_id,
                    "the bookie is another instance now: moving the fragment instead of filling it"
                );
                return Ok(Filled::NotHere);
            }
            bad.extend(missing);
            bad.extend(corrupt);
        }
        if bad.is_empty() {
            return Ok(Filled::Done);
        }
        bad.sort_unstable();
        tracing::info!(ledger_id = meta.ledger_id, bookie_id = %f.member.bookie_id, entries = bad.len(), "refilling a bookie's holes");
        self.copy_entries(meta, f, &bad, &f.member, throttle, keep_going, report).await?;
        Ok(Filled::Done)
    }

    /// Copies all of `f` to a replacement, then records the replacement.
    async fn move_fragment(
        &self,
        ledger_id: u64,
        f: &Fragment,
        throttle: &Throttle,
        keep_going: &(dyn Fn() -> bool + Sync),
        report: &mut Repair,
    ) -> Result<(), ClientError> {
        let meta = self.metadata(ledger_id).await?;
        let seg = &meta.segments[f.segment];
        if seg.first_entry_id != f.first_entry_id || seg.members.get(f.position) != Some(&f.member) {
            return Ok(()); // moved by someone else meanwhile
        }
        let candidates = self.bookies().candidates().await?;
        let ensemble: Vec<String> = seg.members.iter().map(|m| m.bookie_id.clone()).collect();
        let to = choose_replacement(
            &ensemble,
            f.position,
            meta.quorums.write,
            &candidates,
            &BTreeSet::new(),
            self.next_seed(),
        )
        .map_err(|e| ClientError::NotEnoughBookies(e.to_string()))?;
        let instance_id =
            candidates.iter().find(|c| c.bookie_id == to).map(|c| c.instance_id.clone()).unwrap_or_default();
        let target = Member { bookie_id: to, instance_id };
        let ids: Vec<u64> = f.entries(&meta.quorums).collect();
        tracing::info!(
            ledger_id,
            from = %f.member.bookie_id,
            to = %target.bookie_id,
            first_entry_id = f.first_entry_id,
            last_entry_id = f.last_entry_id,
            entries = ids.len(),
            "re-replicating a fragment"
        );
        self.copy_entries(&meta, f, &ids, &target, throttle, keep_going, report).await?;
        // The claim is what keeps the target bookie's GC off copies no
        // ensemble names yet: without it, recording the target could name a
        // bookie that has just dropped them.
        if !keep_going() {
            return Err(ClientError::Timeout("the claim on the ledger was lost".into()));
        }
        if meta.state == LedgerState::Closed {
            // No writer may ever add to a closed ledger's new replica.
            let answer = self.bookies().fence(&target, ledger_id, meta.version, self.options().read_timeout).await;
            if matches!(answer, crate::recovery::FenceAnswer::Failed) {
                return Err(ClientError::Timeout(format!("fencing ledger {ledger_id} on {}", target.bookie_id)));
            }
        }
        // Record it; a conflict re-reads and re-applies while the planned
        // member is still there (a writer's ensemble change, say).
        let mut current = meta;
        loop {
            let Some(intended) = with_member_replaced(&current, f, target.clone()) else {
                return Ok(()); // replaced by someone else: our copies are unreferenced
            };
            match self.cas(&current, &intended).await? {
                Ok(_) => {
                    tracing::info!(ledger_id, from = %f.member.bookie_id, to = %target.bookie_id, "fragment re-replicated");
                    return Ok(());
                }
                Err(stored) => current = stored,
            }
        }
    }

    /// Reads `ids` from the other replicas of `f`'s segment and stores them on `to`.
    #[allow(clippy::too_many_arguments)]
    async fn copy_entries(
        &self,
        meta: &LedgerMeta,
        f: &Fragment,
        ids: &[u64],
        to: &Member,
        throttle: &Throttle,
        keep_going: &(dyn Fn() -> bool + Sync),
        report: &mut Repair,
    ) -> Result<(), ClientError> {
        let seg = &meta.segments[f.segment];
        let mut at = 0;
        while at < ids.len() {
            if !keep_going() {
                return Err(ClientError::Timeout("the claim on the ledger was lost".into()));
            }
            let end = (at + COPY_BATCH_ENTRIES).min(ids.len());
            let entries = self.read_copies(meta, seg, f.position, &ids[at..end]).await?;
            let mut batch = Vec::with_capacity(entries.len());
            let mut bytes = 0usize;
            for e in entries {
                bytes += e.payload.len();
                batch.push(e);
                if bytes >= COPY_BATCH_BYTES {
                    break;
                }
            }
            let n = batch.len();
            throttle.take(bytes as u64).await;
            self.bookies()
                .replicate(to, batch, self.options().add_timeout)
                .await
                .map_err(|e| ClientError::Timeout(format!("copying to {}: {e}", to.bookie_id)))?;
            report.entries_copied += n as u64;
            report.bytes_copied += bytes as u64;
            at += n;
        }
        Ok(())
    }

    /// `ids` (ascending, all of `seg`, all held by `position`) from the
    /// other replicas of their write sets: by batch reads of the position's
    /// stripe ([`read_plan::cover`], the position avoided), neighbouring ids
    /// together; what the batches did not bring, one by one
    /// ([`Client::read_copy`]).
    pub async fn read_copies(
        &self,
        meta: &LedgerMeta,
        seg: &Segment,
        position: usize,
        ids: &[u64],
    ) -> Result<Vec<Entry>, ClientError> {
        let q = &meta.quorums;
        let avoid = 1u64 << position;
        let mut out = Vec::with_capacity(ids.len());
        // Ids further apart than a few stripes are read apart: a batch over
        // the gap would bring entries nobody needs.
        let gap = 4 * q.ensemble as u64;
        for run in ids.chunk_by(|a, b| b - a <= gap) {
            let (first, last) = (run[0], run[run.len() - 1]);
            let asks = read_plan::cover(q, first, last, read_plan::held_by(q, position), avoid);
            let (mut slots, _) = gather(self, meta, seg, first, last, asks, avoid).await;
            for id in run {
                match slots[(id - first) as usize].take() {
                    Some(e) => out.push(e),
                    None => out.push(self.read_copy(meta, &seg.members, position, *id).await?),
                }
            }
        }
        Ok(out)
    }

    /// `entry_id` from a replica other than `position`, CRC and identity
    /// checked; every replica is tried before giving up (a bookie refilling
    /// what it lost reads its copies this way).
    pub async fn read_copy(
        &self,
        meta: &LedgerMeta,
        members: &[Member],
        position: usize,
        entry_id: u64,
    ) -> Result<Entry, ClientError> {
        let timeout = self.options().read_timeout;
        // Why no copy came back, if not corruption: "every copy is corrupt"
        // must mean that (the fault suite saw it for replicas that merely
        // did not answer during a metadata failover).
        let mut unanswered: Option<RpcError> = None;
        let mut corrupt = false;
        for p in meta.quorums.write_set(entry_id) {
            if p == position {
                continue;
            }
            match self.bookies().read(&members[p].bookie_id, meta.ledger_id, entry_id, false, timeout).await {
                Ok(r) => match r.body.entry {
                    Some(e) if e.digest_ok() && e.ledger_id == meta.ledger_id && e.entry_id == entry_id => {
                        return Ok(e)
                    }
                    _ => {
                        corrupt = true;
                        tracing::warn!(ledger_id = meta.ledger_id, entry_id, bookie_id = %members[p].bookie_id, "corrupt copy skipped")
                    }
                },
                Err(RpcError::Remote { code: ErrorCode::CorruptEntry, .. }) => corrupt = true,
                Err(e) => {
                    tracing::debug!(ledger_id = meta.ledger_id, entry_id, bookie_id = %members[p].bookie_id, error = %e, "replica read failed");
                    unanswered = Some(e);
                }
            }
        }
        // The bookie being repaired may still serve it (a draining bookie does).
        if let Some(m) = members.get(position) {
            if let Ok(r) = self.bookies().read(&m.bookie_id, meta.ledger_id, entry_id, false, timeout).await {
                if let Some(e) =
                    r.body.entry.filter(|e| e.digest_ok() && e.ledger_id == meta.ledger_id && e.entry_id == entry_id)
                {
                    return Ok(e);
                }
            }
        }
        match unanswered {
            Some(e) if !corrupt => Err(ClientError::Rpc(e)),
            _ => Err(ClientError::Corrupt(meta.ledger_id, entry_id)),
        }
    }
}
