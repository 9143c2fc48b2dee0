//! Ensemble changes against the metadata service: choose replacements,
//! compare-and-set, and settle conflicts.

use tokio::time::Instant;

use crate::meta::{writer_conflict, Conflict, LedgerMeta, LedgerState};
use crate::placement::replace_members;
use crate::shell::client::Client;
use crate::shell::error::ClientError;
use crate::writer::Member;

/// Chooses bookies for the `failed` positions of recovery's write-back
/// ensemble `members`, retrying (no writable bookie yet, registry
/// unavailable) until the client's ensemble-change deadline. Stores
/// nothing: recovery's ensembles reach the metadata only with its close
/// (`crate::recovery`). Fails with LedgerFenced once the ledger is closed
/// (another recovery finished first).
pub(crate) async fn choose_replacements(
    client: &Client,
    ledger_id: u64,
    write_quorum: usize,
    members: &[Member],
    failed: &[usize],
) -> Result<Vec<Member>, ClientError> {
    let deadline = Instant::now() + client.options().ensemble_change_deadline;
    let pause = std::time::Duration::from_millis(200);
    loop {
        if let Ok(stored) = client.metadata(ledger_id).await {
            if stored.state == LedgerState::Closed {
                return Err(ClientError::LedgerFenced(ledger_id));
            }
        }
        let chosen = match client.bookies().candidates().await {
            Ok(candidates) => replace_members(members, failed, write_quorum, &candidates, client.next_seed())
                .map_err(|e| ClientError::NotEnoughBookies(e.to_string())),
            Err(e @ ClientError::MetadataUnavailable(_)) => Err(e),
            Err(e) => return Err(e),
        };
        match chosen {
            Ok(m) => {
                tracing::info!(
                    ledger_id,
                    ensemble = ?m.iter().map(|m| &m.bookie_id).collect::<Vec<_>>(),
                    "recovery's write-back ensemble changed (stored with the close)"
                );
                return Ok(m);
            }
            Err(e) if Instant::now() + pause >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(pause).await,
        }
    }
}

/// Replaces the members at `failed` positions of the last ensemble from
/// `first_entry_id` on. Keeps trying (no writable bookie yet, metadata
/// unavailable) until the client's ensemble-change deadline. Fails with
/// LedgerFenced when the ledger was closed, recovered or changed by anyone else.
pub(crate) async fn change_ensemble(
    client: &Client,
    mut meta: LedgerMeta,
    failed: &[usize],
    first_entry_id: u64,
) -> Result<LedgerMeta, ClientError> {
    let deadline = Instant::now() + client.options().ensemble_change_deadline;
    let pause = std::time::Duration::from_millis(200);
    // Closed or recovered meanwhile: fenced, whether or not a replacement
    // exists (the bookies that failed may be ones that recovery replaced).
    if let Ok(stored) = client.metadata(meta.ledger_id).await {
        match writer_conflict(&meta, &stored) {
            Conflict::Fenced if stored.version != meta.version => {
                return Err(ClientError::LedgerFenced(meta.ledger_id));
            }
            _ => meta = stored,
        }
    }
    loop {
        let retry = |e: ClientError| async move {
            if Instant::now() + pause >= deadline {
                return Err(e);
            }
            tokio::time::sleep(pause).await;
            Ok(())
        };
        let candidates = match client.bookies().candidates().await {
            Ok(c) => c,
            Err(e @ ClientError::MetadataUnavailable(_)) => {
                retry(e).await?;
                continue;
            }
            Err(e) => return Err(e),
        };
        let members = match replace_members(
            &meta.last_segment().members,
            failed,
            meta.quorums.write,
            &candidates,
            client.next_seed(),
        ) {
            Ok(m) => m,
            Err(e) => {
                retry(ClientError::NotEnoughBookies(e.to_string())).await?;
                continue;
            }
        };
        let intended = meta.with_ensemble(first_entry_id, members);
        match client.cas(&meta, &intended).await {
            Ok(Ok(stored)) => {
                tracing::info!(
                    ledger_id = meta.ledger_id,
                    first_entry_id,
                    ensemble = ?stored.last_segment().members.iter().map(|m| &m.bookie_id).collect::<Vec<_>>(),
                    "ensemble changed"
                );
                return Ok(stored);
            }
            Ok(Err(stored)) => match writer_conflict(&meta, &stored) {
                Conflict::Fenced => return Err(ClientError::LedgerFenced(meta.ledger_id)),
                Conflict::Retry(_) => meta = stored,
            },
            Err(e @ ClientError::MetadataUnavailable(_)) => {
                // The outcome is unknown: settle it against this attempt's
                // intent before choosing anew.
                retry(e).await?;
                if let Ok(stored) = client.metadata(meta.ledger_id).await {
                    if stored.version > meta.version
                        && stored.state == intended.state
                        && stored.segments == intended.segments
                    {
                        return Ok(stored);
                    }
                    match writer_conflict(&meta, &stored) {
                        Conflict::Fenced => return Err(ClientError::LedgerFenced(meta.ledger_id)),
                        Conflict::Retry(_) => meta = stored,
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
}
