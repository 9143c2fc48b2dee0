//! Drives [`Recovery`] over the bookies and the metadata service.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::meta::{writer_conflict, Conflict, LedgerMeta, LedgerState};
use crate::recovery::{BookieRead, FenceAnswer, Recovery, RecoveryOptions, Step};
use crate::shell::client::Client;
use crate::shell::ensemble::choose_replacements;
use crate::shell::error::ClientError;
use crate::writer::{Answer, Command, FailReason, Member};

enum Event {
    Fenced(usize, FenceAnswer),
    Read(u64, usize, BookieRead),
    Wrote(u64, usize, Member, Answer),
    Replaced(u64, Result<Vec<Member>, ClientError>),
}

type Task = Pin<Box<dyn Future<Output = Event> + Send>>;

/// What one recovery did: the closed ledger, and when this recovery's
/// fence took hold.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// The ledger as closed (by this recovery or one that closed it first).
    pub meta: LedgerMeta,
    pub started_at: Instant,
    /// When the fence answers covered every write set with Qw - Qa + 1
    /// bookies, taken after the answer that made it so: no add the old
    /// writer invoked later can be acknowledged. None when the ledger was
    /// closed already and this recovery fenced nothing.
    pub fenced_at: Option<Instant>,
    pub finished_at: Instant,
}

/// Marks the ledger in recovery (unless closed or already so), then recovers it.
pub(crate) async fn recover(client: &Client, ledger_id: u64) -> Result<Recovered, ClientError> {
    let started_at = Instant::now();
    let done = |meta, fenced_at| Recovered { meta, started_at, fenced_at, finished_at: Instant::now() };
    let mut meta = client.metadata(ledger_id).await?;
    // `meta` stays the record as recovery found it: recovery's own ensemble
    // changes are stored only with its close.
    loop {
        match meta.state {
            LedgerState::Closed => return Ok(done(meta, None)),
            // Another recovery may have stopped half-way: recovery is safe to repeat.
            LedgerState::InRecovery => break,
            LedgerState::Open => {
                let mut intended = meta.clone();
                intended.state = LedgerState::InRecovery;
                meta = match client.cas(&meta, &intended).await? {
                    Ok(stored) | Err(stored) => stored,
                };
            }
        }
    }
    tracing::info!(ledger_id, version = meta.version, "recovering ledger");
    let opts = client.options();
    let ropts = RecoveryOptions { read_window: opts.recovery_read_window, writer: opts.writer_options(true) };
    let (mut r, steps) = Recovery::new(meta.clone(), ropts);
    let mut tasks: FuturesUnordered<Task> = FuturesUnordered::new();
    let mut queue = steps;
    let mut tick = tokio::time::interval((opts.add_timeout / 4).max(std::time::Duration::from_millis(5)));
    let mut fenced_at = None;
    loop {
        for step in std::mem::take(&mut queue) {
            match step {
                Step::Fence { position, member } => {
                    let (b, v, t) = (client.bookies().clone(), meta.version, opts.read_timeout);
                    tasks.push(Box::pin(
                        async move { Event::Fenced(position, b.fence(&member, ledger_id, v, t).await) },
                    ));
                }
                Step::Read { entry_id, position, member } => {
                    let (b, t) = (client.bookies().clone(), opts.read_timeout);
                    tasks.push(Box::pin(async move {
                        Event::Read(entry_id, position, b.recovery_read(&member, ledger_id, entry_id, t).await)
                    }));
                }
                Step::Write(Command::Send { position, member, entry, recovery }) => {
                    let (b, v, t) = (client.bookies().clone(), meta.version, opts.add_timeout);
                    let entry_id = entry.entry_id;
                    tasks.push(Box::pin(async move {
                        let a = b.add(&member, entry, v, recovery, t).await;
                        Event::Wrote(entry_id, position, member, a)
                    }));
                }
                Step::Replace { failed, first_entry_id, members } => {
                    let (c, w) = (client.clone(), meta.quorums.write);
                    tasks.push(Box::pin(async move {
                        Event::Replaced(first_entry_id, choose_replacements(&c, ledger_id, w, &members, &failed).await)
                    }));
                }
                Step::Write(_) => {}
                Step::Close { last_entry_id, length, ensembles } => {
                    let closed = close_recovered(client, meta, r.base(), last_entry_id, length, ensembles).await?;
                    return Ok(done(closed, fenced_at));
                }
                Step::Failed(e) => {
                    tracing::warn!(ledger_id, error = %e, "recovery failed; the ledger stays in recovery");
                    return Err(ClientError::RecoveryFailed(ledger_id, e));
                }
            }
        }
        let now = Instant::now();
        tokio::select! {
            Some(ev) = tasks.next(), if !tasks.is_empty() => {
                queue = match ev {
                    Event::Fenced(p, a) => r.fence_answered(p, a, now),
                    Event::Read(e, p, a) => r.read_answered(e, p, a, now),
                    Event::Wrote(e, p, m, a) => r.write_answered(e, p, &m, a, now),
                    Event::Replaced(first, Ok(members)) => r.replaced(first, members, now),
                    Event::Replaced(_, Err(e)) => {
                        tracing::warn!(ledger_id, error = %e, "recovery's ensemble change failed");
                        r.write_aborted(match e {
                            ClientError::NotEnoughBookies(_) => FailReason::NotEnoughBookies,
                            ClientError::LedgerFenced(_) => FailReason::Fenced,
                            _ => FailReason::MetadataUnavailable,
                        })
                    }
                };
            }
            _ = tick.tick() => queue = r.tick(now),
        }
        if fenced_at.is_none() && r.fenced() {
            // Now, not `now`: that was taken before the answer arrived.
            fenced_at = Some(Instant::now());
        }
    }
}

/// Closes the recovered ledger at its true tail, storing recovery's
/// write-back ensembles from `base` on in the same CAS. If another recovery
/// closed it first, that close stands (both found a tail at or past every
/// acknowledged entry: entries past an absent one were never acknowledged).
/// A re-replication of an earlier segment meanwhile is kept: the CAS is
/// retried on top of it.
async fn close_recovered(
    client: &Client,
    found: LedgerMeta,
    base: u64,
    last_entry_id: i64,
    length: u64,
    ensembles: std::collections::BTreeMap<u64, Vec<Member>>,
) -> Result<LedgerMeta, ClientError> {
    let ledger_id = found.ledger_id;
    let mut stored = found;
    for _ in 0..8 {
        let intended = stored.closed_by_recovery(base, &ensembles, last_entry_id, length);
        match client.cas(&stored, &intended).await? {
            Ok(closed) => {
                tracing::info!(ledger_id, last_entry_id, length, "recovered and closed ledger");
                return Ok(closed);
            }
            Err(now) if now.state == LedgerState::Closed => {
                if now.last_entry_id != last_entry_id {
                    tracing::warn!(
                        ledger_id,
                        ours = last_entry_id,
                        theirs = now.last_entry_id,
                        "another recovery closed the ledger at a different tail"
                    );
                }
                return Ok(now);
            }
            Err(now) => match writer_conflict(&stored, &now) {
                Conflict::Retry(_) => stored = now,
                Conflict::Fenced => break,
            },
        }
    }
    Err(ClientError::MetadataUnavailable(format!("ledger {ledger_id} changed during recovery; recover again")))
}
