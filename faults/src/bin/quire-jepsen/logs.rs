//! The log workload (issue LOGS): two writers race for one log, each
//! taking it over again and again (every takeover fences the other), with
//! idempotent appends on a few lanes each that retry what was left open
//! through the next takeover (lane 0 of each writer conditional, lane 1
//! atomic batches of 2 to 5 records: issue #47); a reader at a durable cursor that holds
//! retention; a trimmer behind the cursor. The log rolls every 100 records,
//! so takeovers, rollovers and trims interleave under the faults. At the
//! finale one more takeover fences both writers and the whole log is read
//! back from its trim point.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quire_client::sim::rng::Rng;
use quire_client::{Client, ClientError, CursorStart, LogWriter};
use quire_faults::history::BatchOf;
use quire_faults::{Op, Outcome};
use quire_log::config::{LogConfig, Retention, Rollover};

use crate::workload::{digest, Shared};

/// The run's log.
pub const LOG: &str = "jepsen-log";
/// The reader's cursor.
const CURSOR: &str = "reader";
/// Appends in flight per writer (one per lane: a lane's producer id has
/// at most one sequence open, well inside the de-duplication window).
const LANES: u64 = 4;

fn config() -> LogConfig {
    LogConfig {
        ensemble_size: 3,
        write_quorum: 2,
        ack_quorum: 2,
        // Small ledgers: rollovers all the time, and takeovers rebuild
        // the producers from little.
        rollover: Rollover { max_entries: 100, max_bytes: 0, max_age_ms: 0 },
        retention: Retention::default(),
    }
}

/// Whether the system said no: the append did not happen as far as it knows.
fn refused(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::BadRequest(_)
            | ClientError::EntryTooLarge(_)
            | ClientError::SequenceTooOld { .. }
            | ClientError::PreconditionFailed { .. }
    )
}

/// Creates the log and the reader's cursor (retried through faults until
/// `deadline`); recorded as the first takeover (epoch 1).
pub async fn setup(process: u32, client: &Client, sh: &Shared, deadline: Duration) -> anyhow::Result<()> {
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let invoked = sh.now_us();
        match client.create_log(LOG, config(), &format!("jepsen-{process}")).await {
            Ok(w) => {
                let epoch = w.metadata().await.record.epoch;
                sh.record(process, invoked, Outcome::Ok, Op::LogOpen { log: LOG.into(), epoch: Some(epoch) }, None);
                break;
            }
            // A lost reply of a creation that landed.
            Err(ClientError::LogExists(_)) => break,
            Err(e) if tokio::time::Instant::now() < until => {
                eprintln!("quire-jepsen: creating the run's log: {e}; again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => anyhow::bail!("could not create log {LOG}: {e}"),
        }
    }
    loop {
        match client.create_cursor(LOG, CURSOR, CursorStart::Start, true).await {
            Ok(_) => return Ok(()),
            Err(ClientError::BadRequest(why)) if why.contains("exists") => return Ok(()),
            Err(e) if tokio::time::Instant::now() < until => {
                eprintln!("quire-jepsen: creating the reader's cursor: {e}; again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => anyhow::bail!("could not create cursor {CURSOR}: {e}"),
        }
    }
}

/// One record a lane has yet to see acknowledged (a retry keeps its bytes
/// and its sequence).
struct Lane {
    producer: String,
    sequence: u64,
    /// Its records (a batch's, on a batch lane), retried whole.
    payload: Option<Vec<Bytes>>,
    /// A batch lane (lane 1 of each writer, issue #47): each append is a
    /// batch of 2 to 5 records, written whole or not at all.
    batches: bool,
    /// A conditional lane (lane 0 of each writer, issue #47): the offset
    /// it expects the log's next record at (what it last wrote or was
    /// told, plus one). The two writers' conditional lanes race for the
    /// same offsets across every takeover.
    expected: Option<u64>,
}

/// A log writer: takes the log over, appends on its lanes until its quota
/// is written or an append fails (fenced by the other writer, most often),
/// pauses, and takes the log over again; what was left open is retried,
/// idempotently, under the new epoch.
pub async fn writer(process: u32, client: Client, sh: Arc<Shared>, seed: u64, pace: Duration) {
    let mut rng = Rng::new(seed);
    let mut lanes: Vec<Lane> = (0..LANES)
        .map(|l| Lane {
            producer: format!("w{process}-{l}"),
            sequence: 0,
            payload: None,
            batches: l == 1,
            expected: (l == 0).then_some(0),
        })
        .collect();
    while !sh.stop.load(Ordering::Relaxed) {
        let invoked = sh.now_us();
        let w = match client.open_log_writer(LOG, &format!("jepsen-{process}")).await {
            Ok(w) => w,
            Err(e) => {
                let outcome = if matches!(e, ClientError::BadRequest(_)) { Outcome::Fail } else { Outcome::Unknown };
                sh.record(process, invoked, outcome, Op::LogOpen { log: LOG.into(), epoch: None }, Some(e.to_string()));
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let epoch = w.metadata().await.record.epoch;
        sh.record(process, invoked, Outcome::Ok, Op::LogOpen { log: LOG.into(), epoch: Some(epoch) }, None);
        let quota = rng.range(50, 400);
        let runs: Vec<_> = lanes
            .drain(..)
            .map(|lane| {
                let (w, sh) = (w.clone(), sh.clone());
                let seed = rng.next_u64();
                tokio::spawn(run_lane(process, w, sh, lane, epoch, quota / LANES + 1, seed, pace))
            })
            .collect();
        for r in runs {
            lanes.push(r.await.expect("a log lane panicked"));
        }
        // Give the other writer its turn, sometimes not.
        tokio::time::sleep(Duration::from_millis(rng.range(0, 1_500))).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_lane(
    process: u32,
    w: LogWriter,
    sh: Arc<Shared>,
    mut lane: Lane,
    epoch: u64,
    quota: u64,
    seed: u64,
    pace: Duration,
) -> Lane {
    let mut rng = Rng::new(seed);
    for _ in 0..quota {
        if sh.stop.load(Ordering::Relaxed) && lane.payload.is_none() {
            break;
        }
        let payloads = match &lane.payload {
            Some(p) => p.clone(),
            None => {
                let n = if lane.batches { rng.range(2, 6) } else { 1 };
                let p: Vec<Bytes> = (0..n).map(|i| payload(&mut rng, &lane.producer, lane.sequence + i)).collect();
                lane.payload = Some(p.clone());
                p
            }
        };
        let digests: Vec<u64> = payloads.iter().map(|p| digest(p)).collect();
        let len = digests.len();
        let (batches, expected) = (lane.batches, lane.expected);
        let invoked = sh.now_us();
        // One event per record, each with the batch's outcome.
        let record = |outcome: Outcome, offsets: Option<&[u64]>, error: Option<String>| {
            for (i, &d) in digests.iter().enumerate() {
                let batch = batches.then_some(BatchOf { id: digests[0], index: i as u32, len: len as u32 });
                let offset = offsets.map(|o| o[i]);
                let op = Op::LogAppend { log: LOG.into(), epoch, offset, digest: d, expected, batch };
                sh.record(process, invoked, outcome, op, error.clone());
            }
        };
        match w.append_batch_at(payloads, Some((&lane.producer, lane.sequence)), expected).await {
            Ok(offsets) => {
                record(Outcome::Ok, Some(&offsets), None);
                lane.payload = None;
                lane.sequence += len as u64;
                lane.expected = expected.map(|_| offsets[len - 1] + 1);
            }
            Err(e @ ClientError::PreconditionFailed { next_offset, .. }) => {
                // Nothing written (had an earlier attempt of this sequence
                // been, the retry would have answered its offset): the
                // lane's next record expects the log's end.
                record(Outcome::Fail, None, Some(e.to_string()));
                lane.payload = None;
                lane.sequence += len as u64;
                lane.expected = Some(next_offset);
            }
            Err(e) => {
                // Fenced, timed out, the writer broken: the records may be
                // in the log (kept by the next owner's recovery) or not;
                // the next takeover's retry says which. Refused: never.
                let outcome = if refused(&e) { Outcome::Fail } else { Outcome::Unknown };
                record(outcome, None, Some(e.to_string()));
                if outcome == Outcome::Fail {
                    lane.payload = None;
                    lane.sequence += len as u64;
                }
                break;
            }
        }
        tokio::time::sleep(pace).await;
    }
    lane
}

fn payload(rng: &mut Rng, producer: &str, sequence: u64) -> Bytes {
    let mut s = format!("{producer} s{sequence} ").into_bytes();
    let len = rng.range(16, 513) as usize;
    while s.len() < len {
        s.push(b'a' + (rng.range(0, 26) as u8));
    }
    Bytes::from(s)
}

/// Records a cursor reader asks for at once: an answer with fewer ended
/// at the log's end as the read saw it (read your writes: every record
/// acknowledged before the read began is within it).
const READ_LIMIT: usize = 256;

/// The cursor reader: reads on from its durable cursor (following the
/// tail), records what it read, acknowledges it (written at most every
/// 200 ms); after an error it opens the cursor again, from what was last
/// written (delivery is at least once).
pub async fn reader(process: u32, client: Client, sh: Arc<Shared>) {
    while !sh.stop.load(Ordering::Relaxed) {
        let cursor = match quire_client::LogCursor::open(&client, LOG, CURSOR, Duration::from_millis(200)).await {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while !sh.stop.load(Ordering::Relaxed) {
            let from = cursor.read_at();
            let invoked = sh.now_us();
            match cursor.next(READ_LIMIT, Duration::from_millis(500)).await {
                Ok(got) => {
                    let records: Vec<(u64, u64)> = got.iter().map(|e| (e.offset, digest(&e.payload))).collect();
                    let times = got.iter().map(|e| e.time_ms).collect();
                    let end = got.last().map(|e| e.offset + 1);
                    let op = Op::LogRead { log: LOG.into(), from, limit: READ_LIMIT, records, times };
                    sh.record(process, invoked, Outcome::Ok, op, None);
                    if let Some(end) = end {
                        if cursor.ack(end).await.is_err() {
                            break;
                        }
                    }
                }
                Err(e) => {
                    let op = Op::LogRead { log: LOG.into(), from, limit: READ_LIMIT, records: vec![], times: vec![] };
                    sh.record(process, invoked, Outcome::Unknown, op, Some(e.to_string()));
                    break;
                }
            }
        }
        let _ = cursor.flush().await;
    }
}

/// The trimmer: every few seconds, trims the log to well behind the
/// reader's written cursor (the final read then still checks the last
/// thousand records or so) (which holds retention: a trim past it must be
/// refused, and then nothing is recorded as trimmed).
pub async fn trimmer(process: u32, client: Client, sh: Arc<Shared>, seed: u64) {
    let mut rng = Rng::new(seed);
    while !sh.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.range(2_000, 5_000))).await;
        let Ok(c) = client.cursor(LOG, CURSOR).await else { continue };
        // Now and then past the cursor: the metadata service must refuse.
        let before = if rng.chance(0.2) { c.position + 50 } else { c.position.saturating_sub(rng.range(800, 1_500)) };
        let invoked = sh.now_us();
        let (outcome, error) = match client.trim_log(LOG, before).await {
            Ok(m) if m.record.trim_before >= before => (Outcome::Ok, None),
            Ok(m) => (Outcome::Fail, Some(format!("trim point stayed at {}", m.record.trim_before))),
            Err(e @ (ClientError::BadRequest(_) | ClientError::PermissionDenied(_))) => {
                (Outcome::Fail, Some(e.to_string()))
            }
            Err(e) => (Outcome::Unknown, Some(e.to_string())),
        };
        sh.record(process, invoked, outcome, Op::LogTrim { log: LOG.into(), before }, error);
    }
}

/// The finale's read-back: one more takeover fences both writers, then
/// the whole log from its trim point to its fixed end.
pub async fn read_back(process: u32, client: &Client, sh: &Shared, deadline: Duration) -> Result<usize, String> {
    let until = tokio::time::Instant::now() + deadline;
    let mut last_error = String::new();
    while tokio::time::Instant::now() < until {
        let invoked = sh.now_us();
        let w = match client.open_log_writer(LOG, &format!("jepsen-{process}")).await {
            Ok(w) => w,
            Err(e) => {
                last_error = e.to_string();
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let meta = w.metadata().await;
        sh.record(process, invoked, Outcome::Ok, Op::LogOpen { log: LOG.into(), epoch: Some(meta.record.epoch) }, None);
        let (trim, end) = (meta.record.trim_before, meta.record.fixed_end());
        let mut records = Vec::new();
        let mut times = Vec::new();
        let mut from = trim;
        let invoked = sh.now_us();
        while from < end {
            match client.read_log(LOG, from, 4096).await {
                Ok(got) if !got.is_empty() => {
                    records.extend(got.iter().map(|e| (e.offset, digest(&e.payload))));
                    times.extend(got.iter().map(|e| e.time_ms));
                    from = got.last().expect("non-empty").offset + 1;
                }
                Ok(_) => {
                    last_error = format!("the read stopped at {from}, short of the fixed end {end}");
                    break;
                }
                Err(e) => {
                    last_error = e.to_string();
                    break;
                }
            }
        }
        if from < end {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let n = records.len();
        sh.record(
            process,
            invoked,
            Outcome::Ok,
            Op::LogFinal { log: LOG.into(), trim_before: trim, records, times },
            None,
        );
        return Ok(n);
    }
    Err(last_error)
}
