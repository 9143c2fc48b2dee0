//! The load shapes (loadtest/README.md): append-heavy, tail-read,
//! catch-up read, mixed, and logs (appends with offsets and reads across
//! rollovers of a log per user, issue #23). Every user owns its session; a user whose
//! ledger went wrong (an append that failed may or may not have landed)
//! drops it and starts a fresh one rather than guess the next entry id.

use crate::gateway;
use crate::settings::Settings;
use goose::prelude::*;
use rand::Rng;
use std::sync::Mutex;

/// Ledgers append-heavy users are writing now: what tail readers follow.
static WRITING: Mutex<Vec<u64>> = Mutex::new(Vec::new());

fn writing() -> std::sync::MutexGuard<'static, Vec<u64>> {
    WRITING.lock().expect("writing registry lock")
}

/// One user's state.
#[derive(Debug, Default, Clone)]
struct Session {
    /// The ledger written (or followed, or read back); None after a failure.
    ledger: Option<u64>,
    /// The next entry id to append.
    next: u64,
    /// The next entry id to read.
    read_next: u64,
    /// The last entry of a catch-up ledger.
    last: u64,
    /// Whether this user appends to `ledger` itself (tail-read without writers to follow).
    own: bool,
    /// Closed ledgers of a mixed user, oldest first.
    closed: Vec<u64>,
}

fn session(user: &mut GooseUser) -> &mut Session {
    if user.get_session_data::<Session>().is_none() {
        user.set_session_data(Session::default());
    }
    user.get_session_data_mut::<Session>().expect("set just above")
}

/// The user's ledger, creating one (and forgetting the failed one) if it has none.
async fn ledger(user: &mut GooseUser) -> Result<u64, Box<TransactionError>> {
    if let Some(l) = session(user).ledger {
        return Ok(l);
    }
    let l = gateway::create(user).await?;
    let s = session(user);
    s.ledger = Some(l);
    s.next = 0;
    s.read_next = 0;
    Ok(l)
}

/// Drops the user's ledger after a failed write, closing it on a best-effort basis.
async fn abandon(user: &mut GooseUser, ledger: u64) {
    let s = session(user);
    s.ledger = None;
    writing().retain(|&l| l != ledger);
    // The append that failed may have landed, so the closed length is not
    // known here and not checked.
    let _ = gateway::close(user, ledger, None).await;
}

// ---- append-heavy ---------------------------------------------------------

async fn append_heavy_start(user: &mut GooseUser) -> TransactionResult {
    let l = ledger(user).await?;
    writing().push(l);
    Ok(())
}

async fn append_heavy(user: &mut GooseUser) -> TransactionResult {
    let batch = Settings::get().append_batch;
    let l = ledger(user).await?;
    let next = session(user).next;
    let r = if batch == 1 {
        gateway::append(user, l, next).await
    } else {
        gateway::append_batch(user, l, next, batch, "append_batch").await
    };
    match r {
        Ok(()) => {
            session(user).next += batch as u64;
            Ok(())
        }
        Err(e) => {
            abandon(user, l).await;
            Err(e)
        }
    }
}

async fn stop_writing(user: &mut GooseUser) -> TransactionResult {
    let s = session(user);
    let (Some(l), last) = (s.ledger.take(), s.next as i64 - 1) else { return Ok(()) };
    writing().retain(|&w| w != l);
    gateway::close(user, l, Some(last)).await?;
    if !Settings::get().keep_ledgers {
        gateway::delete(user, l).await?;
    }
    Ok(())
}

// ---- tail-read ------------------------------------------------------------

async fn tail_read_start(user: &mut GooseUser) -> TransactionResult {
    let followed = {
        let w = writing();
        (!w.is_empty()).then(|| w[user.weighted_users_index % w.len()])
    };
    match followed {
        Some(l) => {
            // Start at the writer's tail: this scenario measures following, not catching up.
            let lac = gateway::lac_after(user, l, -1).await?;
            let s = session(user);
            s.ledger = Some(l);
            s.read_next = (lac + 1) as u64;
            s.own = false;
        }
        None => {
            ledger(user).await?;
            session(user).own = true;
        }
    }
    Ok(())
}

async fn tail_read(user: &mut GooseUser) -> TransactionResult {
    let settings = Settings::get();
    // Following nothing (the start failed, or a self-fed ledger was
    // abandoned): write a ledger of its own.
    if session(user).ledger.is_none() {
        session(user).own = true;
    }
    let own = session(user).own;
    let l = if own { ledger(user).await? } else { session(user).ledger.expect("checked just above") };
    if own {
        let next = session(user).next;
        if let Err(e) = gateway::append_batch(user, l, next, settings.tail_batch, "append_batch").await {
            abandon(user, l).await;
            return Err(e);
        }
        session(user).next += settings.tail_batch as u64;
    }
    // A follow of the next batch: the answer ends once its last entry has
    // come (written by this user just above, or by the writer it follows),
    // or the ledger closed first.
    let read_next = session(user).read_next;
    let to = read_next + settings.tail_batch as u64 - 1;
    let n = gateway::follow(user, l, read_next, to).await?;
    session(user).read_next += n;
    Ok(())
}

async fn tail_read_stop(user: &mut GooseUser) -> TransactionResult {
    if session(user).own {
        stop_writing(user).await?;
    }
    Ok(())
}

// ---- catch-up read --------------------------------------------------------

/// Entries per request while a catch-up user fills its ledger.
const FILL_BATCH: u64 = 100;

async fn catch_up_start(user: &mut GooseUser) -> TransactionResult {
    let total = Settings::get().catchup_entries;
    let l = gateway::create(user).await?;
    let mut next = 0;
    while next < total {
        let n = FILL_BATCH.min(total - next);
        gateway::append_batch(user, l, next, n as usize, "fill_batch").await?;
        next += n;
    }
    // Closed, so reads go through a reader to the bookies, as a consumer
    // catching up on an old ledger does.
    gateway::close(user, l, Some(total as i64 - 1)).await?;
    let s = session(user);
    s.ledger = Some(l);
    s.next = total;
    s.last = total - 1;
    s.read_next = 0;
    Ok(())
}

async fn catch_up(user: &mut GooseUser) -> TransactionResult {
    let range = Settings::get().read_range;
    if session(user).ledger.is_none() {
        // The fill on start failed (say, the cluster was still starting): again.
        return catch_up_start(user).await;
    }
    let (l, from, last) = {
        let s = session(user);
        (s.ledger.expect("checked just above"), s.read_next, s.last)
    };
    let to = last.min(from + range - 1);
    let n = gateway::read_range(user, l, from, to).await?;
    if n != to - from + 1 {
        return Err(Box::new(TransactionError::Custom(format!(
            "closed ledger {l}: asked {from}..={to}, got {n} entries"
        ))));
    }
    let s = session(user);
    s.read_next = if to == last { 0 } else { to + 1 };
    Ok(())
}

async fn catch_up_stop(user: &mut GooseUser) -> TransactionResult {
    if let Some(l) = session(user).ledger.take() {
        if !Settings::get().keep_ledgers {
            gateway::delete(user, l).await?;
        }
    }
    Ok(())
}

// ---- mixed ----------------------------------------------------------------

async fn mixed_append(user: &mut GooseUser) -> TransactionResult {
    let l = ledger(user).await?;
    let next = session(user).next;
    match gateway::append(user, l, next).await {
        Ok(()) => {
            session(user).next += 1;
            Ok(())
        }
        Err(e) => {
            abandon(user, l).await;
            Err(e)
        }
    }
}

async fn mixed_read(user: &mut GooseUser) -> TransactionResult {
    let (l, next) = {
        let s = session(user);
        (s.ledger, s.next)
    };
    let Some(l) = l.filter(|_| next > 0) else { return Ok(()) };
    let e = rand::thread_rng().gen_range(0..next);
    gateway::read_one(user, l, e).await
}

/// Closes a full ledger, opens the next, and deletes all but the last two closed ones.
async fn mixed_roll(user: &mut GooseUser) -> TransactionResult {
    let (l, next) = {
        let s = session(user);
        (s.ledger, s.next)
    };
    let Some(l) = l.filter(|_| next >= Settings::get().ledger_entries) else { return Ok(()) };
    gateway::close(user, l, Some(next as i64 - 1)).await?;
    {
        let s = session(user);
        s.ledger = None;
        s.closed.push(l);
    }
    ledger(user).await?;
    while session(user).closed.len() > 2 {
        let old = session(user).closed.remove(0);
        gateway::delete(user, old).await?;
    }
    Ok(())
}

async fn mixed_stop(user: &mut GooseUser) -> TransactionResult {
    stop_writing(user).await?;
    if !Settings::get().keep_ledgers {
        for old in std::mem::take(&mut session(user).closed) {
            gateway::delete(user, old).await?;
        }
    }
    Ok(())
}

// ---- logs -----------------------------------------------------------------

/// A log user's state: its own log (one writer, so offsets are dense), the
/// next offset to append and to read.
#[derive(Debug, Default, Clone)]
struct LogSession {
    name: String,
    /// Names the log in its records' payloads.
    key: u64,
    next: u64,
    read_next: u64,
}

fn log_session(user: &mut GooseUser) -> &mut LogSession {
    if user.get_session_data::<LogSession>().is_none() {
        user.set_session_data(LogSession::default());
    }
    user.get_session_data_mut::<LogSession>().expect("set just above")
}

/// Records per ledger of a log user's log: it rolls over often under load.
const LOG_ROLLOVER: u64 = 200;

async fn log_start(user: &mut GooseUser) -> TransactionResult {
    let key: u64 = rand::thread_rng().gen();
    let name = format!("goose-{}-{key:x}", user.weighted_users_index);
    gateway::create_log(user, &name, LOG_ROLLOVER).await?;
    let s = log_session(user);
    *s = LogSession { name, key, next: 0, read_next: 0 };
    Ok(())
}

async fn log_append(user: &mut GooseUser) -> TransactionResult {
    let (name, key, next) = {
        let s = log_session(user);
        (s.name.clone(), s.key, s.next)
    };
    if name.is_empty() {
        return log_start(user).await;
    }
    // An append that failed may have landed: its retry (same producer and
    // sequence) answers the offset it got, so this user simply asks again.
    gateway::log_append(user, &name, key, next).await?;
    log_session(user).next += 1;
    Ok(())
}

/// Reads on from where this user's reader stands, across rollovers.
async fn log_read(user: &mut GooseUser) -> TransactionResult {
    let (name, key, from, next) = {
        let s = log_session(user);
        (s.name.clone(), s.key, s.read_next, s.next)
    };
    if name.is_empty() || from >= next {
        return Ok(());
    }
    let n = gateway::log_read(user, &name, key, from, 100).await?;
    log_session(user).read_next += n;
    Ok(())
}

async fn log_stop(user: &mut GooseUser) -> TransactionResult {
    let name = std::mem::take(&mut log_session(user).name);
    if !name.is_empty() && !Settings::get().keep_ledgers {
        gateway::delete_log(user, &name).await?;
    }
    Ok(())
}

/// Every scenario, by the name `--scenarios` selects it with.
pub fn all() -> Result<Vec<Scenario>, GooseError> {
    Ok(vec![
        scenario!("appendheavy")
            .register_transaction(transaction!(append_heavy_start).set_on_start().set_name("start"))
            .register_transaction(transaction!(append_heavy).set_name("append"))
            .register_transaction(transaction!(stop_writing).set_on_stop().set_name("stop")),
        scenario!("tailread")
            .register_transaction(transaction!(tail_read_start).set_on_start().set_name("start"))
            .register_transaction(transaction!(tail_read).set_name("follow"))
            .register_transaction(transaction!(tail_read_stop).set_on_stop().set_name("stop")),
        scenario!("catchup")
            .register_transaction(transaction!(catch_up_start).set_on_start().set_name("fill"))
            .register_transaction(transaction!(catch_up).set_name("read"))
            .register_transaction(transaction!(catch_up_stop).set_on_stop().set_name("stop")),
        scenario!("mixed")
            .register_transaction(transaction!(mixed_append).set_weight(8)?.set_name("append"))
            .register_transaction(transaction!(mixed_read).set_weight(2)?.set_name("read"))
            .register_transaction(transaction!(mixed_roll).set_name("roll"))
            .register_transaction(transaction!(mixed_stop).set_on_stop().set_name("stop")),
        scenario!("logs")
            .register_transaction(transaction!(log_start).set_on_start().set_name("start"))
            .register_transaction(transaction!(log_append).set_weight(4)?.set_name("append"))
            .register_transaction(transaction!(log_read).set_name("read"))
            .register_transaction(transaction!(log_stop).set_on_stop().set_name("stop")),
    ])
}
