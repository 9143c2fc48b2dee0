//! After the faults: every ledger is recovered and read back whole (the
//! `Final` events), then the copies of every entry on its write set are
//! counted until autorecovery has restored Qw good copies or the deadline
//! passes (the `Replicas` events). Both go into the history, so the checker
//! judges them with everything else.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire_client::meta::LedgerMeta;
use quire_client::{read_plan, Client};
use quire_faults::{Op, Outcome};
use quire_proto::v1;

use crate::workload::{digest, Shared};

/// The process id finale events are recorded under.
const FINALE: u32 = 1000;
/// Ledgers recovered, read or counted at once.
const FINALE_CONCURRENCY: usize = 32;

/// Recovers and reads every ledger of the run; returns each recovered
/// ledger's entries' digests, and the ledgers that never recovered.
pub async fn read_back(
    client: &Client,
    sh: &Arc<Shared>,
    deadline: Duration,
) -> (BTreeMap<u64, Vec<u64>>, Vec<(u64, String)>) {
    let mut ids: Vec<u64> = sh.ledgers.lock().expect("ledgers lock").keys().copied().collect();
    // Ledgers created whose creation the client never heard back about.
    if let Ok(all) = client.list_all().await {
        ids.extend(all);
    }
    ids.sort_unstable();
    ids.dedup();
    // A bounded number at a time: a thousand recoveries at once on two
    // cores time out their reads, and each ledger's deadline runs from when
    // its turn comes.
    let turns = Arc::new(tokio::sync::Semaphore::new(FINALE_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids {
        let client = client.clone();
        let sh = sh.clone();
        let turns = turns.clone();
        tasks.spawn(async move {
            let _turn = turns.acquire_owned().await.expect("never closed");
            (id, read_one(&client, &sh, id, deadline).await)
        });
    }
    let mut done = BTreeMap::new();
    let mut failed = Vec::new();
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok((id, Ok(digests))) => {
                done.insert(id, digests);
            }
            Ok((id, Err(e))) => failed.push((id, e)),
            Err(e) => panic!("a finale read-back task failed: {e}"),
        }
    }
    failed.sort();
    (done, failed)
}

async fn read_one(client: &Client, sh: &Arc<Shared>, id: u64, deadline: Duration) -> Result<Vec<u64>, String> {
    let until = Instant::now() + deadline;
    let mut last_error = String::new();
    while Instant::now() < until {
        let invoked = sh.now_us();
        match read_whole(client, id).await {
            Ok((last, digests)) => {
                let entries = digests.iter().enumerate().map(|(i, d)| (i as u64, *d)).collect();
                sh.record(FINALE, invoked, Outcome::Ok, Op::Final { ledger: id, last_entry: last, entries }, None);
                return Ok(digests);
            }
            Err(e) => last_error = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(last_error)
}

async fn read_whole(client: &Client, id: u64) -> Result<(i64, Vec<u64>), String> {
    let r = client.open_recovered(id).await.map_err(|e| format!("recover: {e}"))?;
    let last = r.metadata().last_entry_id;
    let mut digests = Vec::new();
    if last < 0 {
        return Ok((last, digests));
    }
    // One scan: batch reads over the ensemble's stripes.
    let mut scan = r.scan(0, last as u64).await.map_err(|e| format!("scan: {e}"))?;
    let mut next = 0u64;
    while let Some(got) = scan.next_batch().await.map_err(|e| format!("read from {next}: {e}"))? {
        for e in got {
            if e.entry_id != next {
                return Err(format!("asked for entry {next}, got {}", e.entry_id));
            }
            digests.push(digest(&e.payload));
            next += 1;
        }
    }
    if next as i64 != last + 1 {
        return Err(format!("the scan ended at {next}, the ledger at {last}"));
    }
    Ok((last, digests))
}

/// Entries of `meta` with fewer than Qw good copies on their write set, as
/// (entry, good copies): a copy is good when its bookie serves it with a
/// valid checksum and the bytes the final read saw. Each member of each
/// segment is asked for its stripe with range reads (ReadEntries), every
/// replica on its own: a copy one bookie lacks is not hidden by another's.
async fn short_copies(client: &Client, meta: &LedgerMeta, digests: &[u64]) -> Vec<(u64, u32)> {
    let q = meta.quorums;
    let n = digests.len() as u64;
    let mut good = vec![0u32; digests.len()];
    for (si, seg) in meta.segments.iter().enumerate() {
        let first = seg.first_entry_id;
        let end = meta.segments.get(si + 1).map_or(n, |s| s.first_entry_id.min(n));
        if first >= end {
            continue;
        }
        let last = end - 1;
        for (position, member) in seg.members.iter().enumerate() {
            let residues = read_plan::held_by(&q, position);
            let mut at = first;
            loop {
                let req = v1::ReadEntriesRequest {
                    ledger_id: meta.ledger_id,
                    first_entry_id: at,
                    last_entry_id: last,
                    stripe_modulus: q.ensemble as u32,
                    stripe_residues: residues,
                    max_entries: 0,
                    max_bytes: 0,
                };
                let Ok(r) = client.bookies().read_entries(&member.bookie_id, req, Duration::from_secs(3)).await else {
                    break;
                };
                for e in &r.body.entries {
                    let id = e.entry_id;
                    let mine = (first..=last).contains(&id) && q.write_set(id).contains(&position);
                    if mine
                        && e.ledger_id == meta.ledger_id
                        && e.digest_ok()
                        && digest(&e.payload) == digests[id as usize]
                    {
                        good[id as usize] += 1;
                    }
                }
                let next = r.body.next_entry_id;
                if !r.body.more || next <= at || next > last {
                    break;
                }
                at = next;
            }
        }
    }
    good.iter().enumerate().filter(|(_, g)| (**g as usize) < q.write).map(|(e, g)| (e as u64, *g)).collect()
}

/// What the copy count found: ledgers still short of Qw copies at the
/// deadline, and ledgers whose copies could never be counted (their
/// metadata never read, or their task failed), with why.
pub struct CopyCount {
    pub short: usize,
    pub uncounted: Vec<(u64, String)>,
}

/// Counts copies until every entry has Qw good ones or `deadline` passes;
/// records one `Replicas` event per ledger (its last count).
pub async fn replicas(
    client: &Client,
    sh: &Arc<Shared>,
    ledgers: &BTreeMap<u64, Vec<u64>>,
    deadline: Duration,
) -> CopyCount {
    let until = Instant::now() + deadline;
    let mut pending: Vec<u64> = ledgers.keys().copied().collect();
    let mut last: BTreeMap<u64, (u32, Vec<(u64, u32)>)> = BTreeMap::new();
    let started = sh.now_us();
    let mut uncounted: BTreeMap<u64, String> = BTreeMap::new();
    loop {
        let mut tasks = tokio::task::JoinSet::new();
        let turns = Arc::new(tokio::sync::Semaphore::new(FINALE_CONCURRENCY));
        for &id in &pending {
            let client = client.clone();
            let digests = ledgers[&id].clone();
            let turns = turns.clone();
            tasks.spawn(async move {
                let _turn = turns.acquire_owned().await.expect("never closed");
                match client.metadata(id).await {
                    Ok(meta) => (id, meta.quorums.write as u32, Ok(short_copies(&client, &meta, &digests).await)),
                    Err(e) => (id, 0, Err(format!("metadata: {e}"))),
                }
            });
        }
        let mut still = Vec::new();
        while let Some(r) = tasks.join_next().await {
            let (id, qw, short) = r.expect("a copy-count task panicked");
            match short {
                Ok(s) if s.is_empty() => {
                    uncounted.remove(&id);
                    last.insert(id, (qw, s));
                }
                Ok(s) => {
                    uncounted.remove(&id);
                    last.insert(id, (qw, s));
                    still.push(id);
                }
                Err(e) => {
                    if !last.contains_key(&id) {
                        uncounted.insert(id, e);
                    }
                    still.push(id);
                }
            }
        }
        pending = still;
        if pending.is_empty() || Instant::now() >= until {
            break;
        }
        eprintln!("finale: {} ledgers still short of Qw copies; waiting for autorecovery", pending.len());
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    for (&id, (qw, short)) in &last {
        sh.record(
            FINALE,
            started,
            Outcome::Ok,
            Op::Replicas { ledger: id, write_quorum: *qw, short: short.clone() },
            None,
        );
    }
    let short = pending.iter().filter(|id| last.contains_key(id)).count();
    CopyCount { short, uncounted: uncounted.into_iter().collect() }
}
