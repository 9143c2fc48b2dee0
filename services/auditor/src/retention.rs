//! Retention of logs (issue #23 item 5), run by the active auditor at each
//! pass: a log whose settings say so is trimmed by whole ledgers past its
//! age (by its records' time, issue #47: each old ledger's last record is
//! read) or size limit (quire-log's `retention::trim_point`), never past its
//! slowest holding cursor. The metadata service lets the auditor move a
//! trim point and nothing else, and refuses a trim past a holding cursor
//! whatever the auditor computed.

use std::collections::BTreeMap;

use quire_client::meta::LedgerMeta;
use quire_client::{Client, ClientError};

/// Logs looked at per pass, at most (the rest wait for the next pass).
const LOGS_PER_PASS: u32 = 1000;

/// Trims every log past its retention; returns how many it trimmed.
pub async fn trim_logs(client: &Client, ledgers: &[LedgerMeta], now_ms: u64) -> Result<u64, ClientError> {
    let lengths: BTreeMap<u64, u64> = ledgers.iter().map(|l| (l.ledger_id, l.length)).collect();
    let (names, _) = client.list_logs("", LOGS_PER_PASS).await?;
    let mut trimmed = 0;
    for name in names {
        let meta = match client.log_meta(&name).await {
            Ok(m) => m,
            Err(ClientError::NoSuchLog(_)) => continue, // deleted meanwhile
            Err(e) => return Err(e),
        };
        let cursors = client.cursors(&name).await.unwrap_or_default();
        let floor = quire_log::cursor::retention_floor(&cursors).map(|(p, _)| p);
        let retention = meta.config.retention;
        let times = last_times(client, &meta.record, retention.max_age_ms, now_ms).await?;
        let Some(to) = quire_log::retention::trim_point(
            &meta.record,
            &retention,
            now_ms,
            floor,
            |id| lengths.get(&id).copied(),
            |id| times.get(&id).copied(),
        ) else {
            continue;
        };
        match client.trim_log(&name, to).await {
            Ok(t) => {
                tracing::info!(log = %name, trim_before = t.record.trim_before, "retention trimmed a log");
                trimmed += 1;
            }
            // A cursor created meanwhile, a deletion: the next pass sees it.
            Err(e @ (ClientError::BadRequest(_) | ClientError::NoSuchLog(_))) => {
                tracing::debug!(log = %name, error = %e, "retention left a log as it is")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(trimmed)
}

/// The last record's time of each of the log's oldest fixed segments that
/// retention by age may trim, read from their ledgers: oldest first, up
/// to the first that is not older than `max_age_ms` (records' times never
/// decrease along a log, so none after it is either). Empty without an
/// age limit.
async fn last_times(
    client: &Client,
    record: &quire_log::LogRecord,
    max_age_ms: u64,
    now_ms: u64,
) -> Result<BTreeMap<u64, u64>, ClientError> {
    let mut times = BTreeMap::new();
    if max_age_ms == 0 {
        return Ok(times);
    }
    for s in record.segments.iter().filter(|s| s.end_offset.is_some()) {
        let t = match client.segment_last_time_ms(record, s.ledger_id).await {
            Ok(t) => t.filter(|t| *t > 0),
            // Trimmed or deleted meanwhile: the next pass sees the log anew.
            Err(ClientError::NoSuchLedger(_)) => return Ok(times),
            Err(e) => return Err(e),
        };
        let aged_from = t.unwrap_or(s.sealed_at_ms);
        if let Some(t) = t {
            times.insert(s.ledger_id, t);
        }
        if aged_from == 0 || now_ms.saturating_sub(aged_from) < max_age_ms {
            break;
        }
    }
    Ok(times)
}
