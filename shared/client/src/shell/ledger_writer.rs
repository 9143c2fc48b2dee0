//! The writer handle: an actor task that owns one ledger's [`Writer`] state
//! machine and executes its commands: adds to bookies, ensemble changes and
//! the close against the metadata service.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};

use crate::meta::{writer_conflict, Conflict, LedgerMeta, LedgerState};
use crate::shell::client::Client;
use crate::shell::ensemble::change_ensemble;
use crate::shell::error::ClientError;
use crate::writer::{AddError, Answer, Command, FailReason, Member, Writer};
use quire_proto::v1::Entry;

/// An acknowledged add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    /// Its entry id.
    pub entry_id: u64,
    /// The LAC once it was acknowledged (at least `entry_id`).
    pub lac: i64,
}

/// An add accepted by the writer, not yet acknowledged.
pub struct PendingAdd {
    rx: oneshot::Receiver<Result<Added, ClientError>>,
    ledger_id: u64,
}

impl Future for PendingAdd {
    type Output = Result<Added, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let ledger_id = self.ledger_id;
        Pin::new(&mut self.rx).poll(cx).map(|r| r.unwrap_or(Err(ClientError::WriterClosed(ledger_id))))
    }
}

type Reply<T> = oneshot::Sender<Result<T, ClientError>>;

/// How a close is written, given the stored metadata and the closed record
/// intended: by default the ledger's own CAS; a log writer's rollover
/// writes it in one command with the log's record (one metadata round
/// trip, and the log never lists a ledger end its ledger does not have).
/// It answers the stored closed metadata, or why the close failed.
pub type Closer = Box<
    dyn FnOnce(LedgerMeta, LedgerMeta) -> Pin<Box<dyn Future<Output = Result<LedgerMeta, ClientError>> + Send>> + Send,
>;

enum Msg {
    /// A payload, where to answer, and the caller's span when it is traced.
    /// Boxed: the channel allocates its slots in blocks of 32 up front,
    /// and an idle writer keeps its channel (issue #46 item 1).
    Add(Box<(Bytes, Reply<Added>, Option<tracing::Span>)>),
    Close(Box<(Reply<LedgerMeta>, Option<Closer>)>),
}

/// Where an idle writer's actor sleeps: no task, no timer, no channel,
/// only its state (issue #46 item 1: 100 000 open ledgers held by one
/// gateway). The handles own it; the actor holds it weakly, so that a
/// sleeping actor goes with the last handle.
type Bed = Mutex<BedState>;

struct BedState {
    /// The sleeping actor; none while it is awake (or ended).
    actor: Option<Box<Actor>>,
    /// The channel to the actor, none while it sleeps: made as it wakes,
    /// closed as it falls asleep (tokio's channel allocates about 1.1 KB
    /// up front, a quarter of an idle writer), closed for good as it ends.
    tx: Option<mpsc::Sender<Msg>>,
}

/// The channel is small: the writer's own pending bound is the real one.
const CHANNEL_CAPACITY: usize = 256;

enum Event {
    Added { entry_id: u64, position: usize, member: Member, answer: Answer },
    AddedBatch { position: usize, member: Member, answers: Vec<(u64, Answer)> },
    LacPublished { position: usize, member: Member, lac: i64, answer: Answer },
    EnsembleChanged(Result<LedgerMeta, ClientError>),
    Closed(Result<LedgerMeta, ClientError>),
    Marked,
}

type Task = Pin<Box<dyn Future<Output = Event> + Send>>;

struct Shared {
    lac: AtomicI64,
    /// Copies of acknowledged entries that were sent and never confirmed.
    lost_copies: AtomicU64,
    /// The highest entry id given to an add (-1: none yet).
    last_entry: AtomicI64,
    /// Shared with the actor's own copy (one allocation per writer).
    meta: Mutex<Arc<LedgerMeta>>,
    /// The runtime the writer was made on: a woken actor runs there, not
    /// on whichever runtime the add came from (an HTTP worker's, say).
    rt: tokio::runtime::Handle,
}

/// The writer of one ledger. Adds are pipelined: [`LedgerWriter::submit`]
/// fixes the order (and waits while too many are pending), the returned
/// future resolves when the add is acknowledged. Cheap to clone; the ledger is
/// not closed when the handle is dropped (recovery closes abandoned ledgers).
#[derive(Clone)]
pub struct LedgerWriter {
    ledger_id: u64,
    shared: Arc<Shared>,
    bed: Arc<Bed>,
    max_entry_bytes: usize,
}

impl LedgerWriter {
    /// `visible_acks`: an add is answered only once a reader that starts
    /// then sees it ([`crate::writer::WriterOptions::visible_acks`]).
    pub(crate) fn spawn(client: Client, meta: LedgerMeta, visible_acks: bool) -> LedgerWriter {
        let opts = client.options().clone();
        let writer_opts = crate::writer::WriterOptions { visible_acks, ..opts.writer_options(false) };
        let writer = Writer::new(meta.ledger_id, meta.quorums, meta.last_segment().members.clone(), writer_opts);
        let meta = Arc::new(meta);
        let shared = Arc::new(Shared {
            lac: AtomicI64::new(-1),
            lost_copies: AtomicU64::new(0),
            last_entry: AtomicI64::new(-1),
            meta: Mutex::new(meta.clone()),
            rt: tokio::runtime::Handle::current(),
        });
        let bed: Arc<Bed> = Arc::new(Mutex::new(BedState { actor: None, tx: None }));
        let actor = Actor {
            bed: Arc::downgrade(&bed),
            client,
            w: writer,
            meta,
            rx_open: true,
            replies: HashMap::new(),
            visible_acks,
            invisible: VecDeque::new(),
            spans: HashMap::new(),
            closers: Vec::new(),
            closing_by: None,
            closing: false,
            close_sent: false,
            finished: false,
            close_result: None,
            lost_on: std::collections::BTreeSet::new(),
            shared: shared.clone(),
            tasks: None,
            outbox: Vec::new(),
        };
        let ledger_id = actor.meta.ledger_id;
        // A new writer has nothing to do: it starts asleep.
        bed.lock().expect("bed lock").actor = Some(Box::new(actor));
        LedgerWriter { ledger_id, shared, bed, max_entry_bytes: opts.max_entry_bytes }
    }

    /// Sends `msg` to the actor, waking it (with a new channel) if it
    /// sleeps. Under the bed's lock the message goes into the channel
    /// (`try_send`: it cannot fail on a new channel); only when the channel
    /// is full does a sender wait outside the lock, holding a clone of the
    /// sender. The actor falls asleep under the same lock, and only with
    /// an empty channel and no clone of its sender out (`strong_count`):
    /// so no send is under way when it drops its channel, and no message is
    /// lost or refused because it fell asleep. (Closing the channel and
    /// draining it would not do: tokio's `try_recv` answers "empty" while a
    /// send that took its slot has not yet written it.)
    async fn send(&self, msg: Msg) -> Result<(), mpsc::error::SendError<Msg>> {
        let tx = {
            let mut bed = self.bed.lock().expect("bed lock");
            if let Some(actor) = bed.actor.take() {
                let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                let sent = tx.try_send(msg).is_ok();
                assert!(sent, "a new channel takes a message");
                bed.tx = Some(tx);
                self.shared.rt.spawn(actor.run(rx));
                return Ok(());
            }
            let tx = bed.tx.as_ref().expect("an awake or ended actor's channel is in the bed");
            match tx.try_send(msg) {
                Ok(()) => return Ok(()),
                // Closed only as the actor ended for good.
                Err(mpsc::error::TrySendError::Closed(m)) => return Err(mpsc::error::SendError(m)),
                Err(mpsc::error::TrySendError::Full(m)) => (tx.clone(), m),
            }
        };
        // Full: the actor is awake and busy, and does not sleep while this
        // clone is out.
        let (tx, msg) = tx;
        tx.send(msg).await
    }

    /// The ledger id.
    pub fn ledger_id(&self) -> u64 {
        self.ledger_id
    }

    /// Whether the writer is idle and its actor asleep: no task and no
    /// timer, until the next add or close wakes it.
    pub fn asleep(&self) -> bool {
        self.bed.lock().expect("bed lock").actor.is_some()
    }

    /// The LAC: every entry up to it is acknowledged.
    pub fn lac(&self) -> i64 {
        self.shared.lac.load(Ordering::Acquire)
    }

    /// The metadata as this writer last wrote or read it.
    pub fn metadata(&self) -> LedgerMeta {
        LedgerMeta::clone(&self.shared.meta.lock().expect("meta lock"))
    }

    /// Copies of acknowledged entries this writer sent and no write-set
    /// member confirmed (failed, timed out, refused): each leaves its entry
    /// below Qw copies until re-replication restores it. The ledger is
    /// marked under-replicated with those bookies once they no longer hold
    /// its last segment (an ensemble change, or its close).
    pub fn lost_copies(&self) -> u64 {
        self.shared.lost_copies.load(Ordering::Acquire)
    }

    /// The highest entry id given to an add (-1: none). Less the LAC, how
    /// far confirmation trails the writes (the LAC lag).
    pub fn last_entry(&self) -> i64 {
        self.shared.last_entry.load(Ordering::Acquire)
    }

    /// Queues an add; returns once it has its place in the ledger (waiting
    /// while the writer is at its pending bound). Await the result for the
    /// acknowledgement.
    pub async fn submit(&self, payload: Bytes) -> Result<PendingAdd, ClientError> {
        if payload.len() > self.max_entry_bytes {
            return Err(ClientError::EntryTooLarge(payload.len()));
        }
        let (reply, rx) = oneshot::channel();
        // A traced caller's add carries its span, so that the requests to the
        // bookies join the caller's trace (untraced: nothing is kept).
        let span = quire_rpc::trace::current().map(|_| tracing::Span::current());
        self.send(Msg::Add(Box::new((payload, reply, span)))).await.map_err(|_| self.gone())?;
        Ok(PendingAdd { rx, ledger_id: self.ledger_id })
    }

    /// Why an add cannot be taken once the writer's actor has ended: the
    /// ledger is closed (as answered while the actor still waited for
    /// copies in flight: one answer, whichever moment the add comes), or
    /// the handle's writer is gone for another reason.
    fn gone(&self) -> ClientError {
        if self.shared.meta.lock().expect("meta lock").state == crate::meta::LedgerState::Closed {
            ClientError::LedgerClosed(self.ledger_id)
        } else {
            ClientError::WriterClosed(self.ledger_id)
        }
    }

    /// Adds one entry and waits for its acknowledgement.
    pub async fn add(&self, payload: Bytes) -> Result<Added, ClientError> {
        self.submit(payload).await?.await
    }

    /// Adds several entries in order; all or (from the first failure on) none
    /// of them are acknowledged. Returns the first and last entry ids.
    pub async fn add_batch(&self, payloads: Vec<Bytes>) -> Result<(u64, u64), ClientError> {
        if payloads.is_empty() {
            return Err(ClientError::BadRequest("an empty batch".into()));
        }
        let mut pending = Vec::with_capacity(payloads.len());
        for p in payloads {
            pending.push(self.submit(p).await?);
        }
        let mut ids = Vec::with_capacity(pending.len());
        for p in pending {
            ids.push(p.await?.entry_id);
        }
        Ok((ids[0], *ids.last().expect("non-empty")))
    }

    /// Waits for pending adds, then closes the ledger at its LAC.
    pub async fn close(&self) -> Result<LedgerMeta, ClientError> {
        self.close_by(None).await
    }

    /// As [`LedgerWriter::close`], with the close written by `closer` (the
    /// first close asked for decides how it is written).
    pub async fn close_with(&self, closer: Closer) -> Result<LedgerMeta, ClientError> {
        self.close_by(Some(closer)).await
    }

    async fn close_by(&self, closer: Option<Closer>) -> Result<LedgerMeta, ClientError> {
        let (reply, rx) = oneshot::channel();
        self.send(Msg::Close(Box::new((reply, closer))))
            .await
            .map_err(|_| ClientError::WriterClosed(self.ledger_id))?;
        rx.await.unwrap_or(Err(ClientError::WriterClosed(self.ledger_id)))
    }
}

struct Actor {
    /// Where it sleeps when idle (held weakly: see [`Bed`]).
    bed: std::sync::Weak<Bed>,
    client: Client,
    w: Writer,
    meta: Arc<LedgerMeta>,
    rx_open: bool,
    replies: HashMap<u64, Reply<Added>>,
    /// Adds are answered once visible ([`crate::writer::WriterOptions::visible_acks`]).
    visible_acks: bool,
    /// Acknowledged adds not yet answered: their LAC is not yet stored on
    /// Qa bookies. In entry order.
    invisible: VecDeque<(u64, Reply<Added>)>,
    /// The caller's span of each traced pending add.
    spans: HashMap<u64, tracing::Span>,
    closers: Vec<Reply<LedgerMeta>>,
    /// How the close is written, when not by the ledger's own CAS.
    closing_by: Option<Closer>,
    closing: bool,
    close_sent: bool,
    /// The close was answered; the actor stays until the copies it sent
    /// before (and re-sent after) are answered: a close cancels none.
    finished: bool,
    /// Boxed: 150 bytes inline that every idle writer would carry.
    close_result: Option<Box<Result<LedgerMeta, ClientError>>>,
    /// Bookies that did not confirm a copy of an acknowledged entry, not
    /// yet reported to the metadata service.
    lost_on: std::collections::BTreeSet<String>,
    shared: Arc<Shared>,
    /// Made on the first task and dropped as the actor falls asleep: an
    /// empty `FuturesUnordered` still holds a 144-byte allocation.
    tasks: Option<FuturesUnordered<Task>>,
    /// Sends decided during this turn of the loop, flushed at its end: the
    /// adds that left together go to each bookie as one AddEntries request.
    outbox: Vec<(usize, Member, Entry, bool)>,
}

/// Most adds (and payload bytes) per AddEntries request.
const BATCH_MAX_ADDS: usize = 256;
const BATCH_MAX_BYTES: usize = 2 << 20;

fn fail_error(reason: &FailReason, ledger_id: u64) -> ClientError {
    match reason {
        FailReason::Fenced => ClientError::LedgerFenced(ledger_id),
        FailReason::Closed => ClientError::LedgerClosed(ledger_id),
        FailReason::NotEnoughBookies => ClientError::NotEnoughBookies("no bookie could replace a failed one".into()),
        FailReason::MetadataUnavailable => {
            ClientError::MetadataUnavailable("the ensemble change could not be recorded".into())
        }
    }
}

impl Actor {
    /// Boxed: the task's future stays small, and sleeping moves the box
    /// into the bed as it is.
    async fn run(mut self: Box<Self>, mut rx: mpsc::Receiver<Msg>) {
        let opts = self.client.options().clone();
        let every = (opts.add_timeout / 4).min(opts.explicit_lac_interval / 2).max(std::time::Duration::from_millis(5));
        // A timer only while time can change something (`Writer::wants_tick`):
        // an idle open ledger costs no wake-ups.
        let mut ticker: Option<tokio::time::Interval> = None;
        let ledger_id = self.meta.ledger_id;
        // A message found while deciding to sleep, handled first.
        let mut early: Option<Msg> = None;
        loop {
            // Idle: sleep, unless a message came meanwhile (see
            // `LedgerWriter::send` for why none is missed). First thing in
            // a turn, so that an actor woken for a message an earlier turn
            // already took goes back to sleep at once.
            if early.is_none() && self.may_sleep() {
                if let Some(bed) = self.bed.upgrade() {
                    let mut slot = bed.lock().expect("bed lock");
                    // Polled with a no-op waker: it replaces this task's
                    // waker in the channel, which would keep the ended
                    // task's memory for as long as the writer sleeps.
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    match rx.poll_recv(&mut cx) {
                        // The message it was woken for, most often.
                        std::task::Poll::Ready(Some(msg)) => early = Some(msg),
                        // Every handle is gone and nothing is under way.
                        std::task::Poll::Ready(None) => {
                            self.rx_open = false;
                            break;
                        }
                        // Asleep only with no sender's clone out (see
                        // `LedgerWriter::send`); else the message it is
                        // about to send keeps the actor awake.
                        std::task::Poll::Pending if slot.tx.as_ref().is_none_or(|t| t.strong_count() == 1) => {
                            slot.tx = None;
                            // What a busy spell grew, given back while it sleeps.
                            self.tasks = None;
                            self.replies = HashMap::new();
                            self.spans = HashMap::new();
                            self.outbox = Vec::new();
                            self.w.release_idle_memory();
                            slot.actor = Some(self);
                            return;
                        }
                        std::task::Poll::Pending => {}
                    }
                }
            }
            if !self.w.wants_tick() {
                ticker = None;
            } else if ticker.is_none() {
                let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticker = Some(t);
            }
            // Take no new adds while at the pending bound (backpressure through
            // the channel) or while closing; a finished writer still answers.
            let accepting =
                self.rx_open && !self.closing && (self.w.done().is_some() || self.w.pending() < opts.max_pending_adds);
            if let Some(msg) = early.take() {
                self.take(&mut rx, Some(msg), &opts);
            } else {
                tokio::select! {
                    msg = rx.recv(), if accepting || (self.rx_open && self.closing) => self.take(&mut rx, msg, &opts),
                    Some(ev) = async { self.tasks.as_mut().expect("tasks").next().await }, if !self.no_tasks() => self.on_event(ev),
                    _ = async { ticker.as_mut().expect("armed").tick().await }, if ticker.is_some() => {
                        let cmds = self.w.tick(std::time::Instant::now());
                        self.execute(cmds);
                    }
                }
            }
            self.flush();
            // Acknowledged adds wait to be visible, and nothing taken since
            // carries their LAC: send it alone now, unless an add is queued
            // that will carry it.
            if !self.invisible.is_empty() && rx.is_empty() {
                let cmds = self.w.publish_lac_now();
                self.execute(cmds);
            }
            if self.closing && !self.close_sent && self.w.pending() == 0 && !self.w.changing() {
                self.start_close();
            }
            if (self.finished || (!self.rx_open && self.w.pending() == 0 && self.invisible.is_empty()))
                && self.no_tasks()
            {
                break;
            }
        }
        for (_, r) in self.invisible.drain(..) {
            let _ = r.send(Err(ClientError::WriterClosed(ledger_id)));
        }
        // What was sent while the last turn ran is answered as a live actor
        // would answer it (a finished writer refuses with its reason:
        // LedgerClosed after our close), not dropped into WriterClosed.
        rx.close();
        while let Ok(msg) = rx.try_recv() {
            match msg {
                Msg::Add(add) => {
                    let (payload, reply, span) = *add;
                    self.on_add(payload, reply, span)
                }
                Msg::Close(close) => {
                    let (reply, _) = *close;
                    let res =
                        self.close_result.as_deref().cloned().unwrap_or(Err(ClientError::WriterClosed(ledger_id)));
                    let _ = reply.send(res);
                }
            }
        }
        tracing::debug!(ledger_id, "writer stopped");
    }

    fn no_tasks(&self) -> bool {
        self.tasks.as_ref().is_none_or(|t| t.is_empty())
    }

    /// Whether nothing is under way that needs the task: no add pending or
    /// answered-but-unacknowledged, no request in flight, no copy to send
    /// again, no close, nothing to report, nothing for time to do. Such a
    /// writer's actor sleeps until the next message.
    fn may_sleep(&self) -> bool {
        self.rx_open
            && !self.closing
            && !self.finished
            && self.no_tasks()
            && self.outbox.is_empty()
            && self.replies.is_empty()
            && self.invisible.is_empty()
            && self.closers.is_empty()
            && self.lost_on.is_empty()
            && self.w.pending() == 0
            && !self.w.changing()
            && self.w.copies_in_flight() == 0
            && !self.w.wants_tick()
    }

    /// Handles `first` and what else is queued (up to a batch), so that
    /// the adds leave together: one AddEntries request to each bookie. A
    /// message is taken off the channel only when this turn will handle it.
    /// (How many are queued depends on the submitters: one that spends its
    /// cooperative budget sooner yields sooner, and leaves fewer.)
    fn take(&mut self, rx: &mut mpsc::Receiver<Msg>, first: Option<Msg>, opts: &crate::ClientOptions) {
        let mut next = first;
        for taken in 1..=BATCH_MAX_ADDS {
            match next {
                Some(Msg::Add(add)) => {
                    let (payload, reply, span) = *add;
                    self.on_add(payload, reply, span)
                }
                Some(Msg::Close(close)) => {
                    let (reply, closer) = *close;
                    match &self.close_result {
                        Some(res) => {
                            let _ = reply.send(Result::clone(res));
                        }
                        None => {
                            self.closers.push(reply);
                            if self.closing_by.is_none() && !self.closing {
                                self.closing_by = closer;
                            }
                            self.closing = true;
                        }
                    }
                }
                None => {
                    self.rx_open = false;
                    return;
                }
            }
            if taken == BATCH_MAX_ADDS
                || self.closing
                || (self.w.done().is_none() && self.w.pending() >= opts.max_pending_adds)
            {
                return;
            }
            match rx.try_recv() {
                Ok(m) => next = Some(m),
                Err(_) => return,
            }
        }
    }

    fn on_add(&mut self, payload: Bytes, reply: Reply<Added>, span: Option<tracing::Span>) {
        let ledger_id = self.meta.ledger_id;
        match self.w.add(payload, std::time::Instant::now()) {
            Ok((entry_id, cmds)) => {
                self.shared.last_entry.fetch_max(entry_id as i64, Ordering::Release);
                self.replies.insert(entry_id, reply);
                if let Some(span) = span {
                    self.spans.insert(entry_id, span);
                }
                self.execute(cmds);
            }
            Err(AddError::Done(r)) => {
                let _ = reply.send(Err(fail_error(&r, ledger_id)));
            }
            Err(AddError::Backpressure(n)) => {
                let _ = reply.send(Err(ClientError::Backpressure(n)));
            }
        }
    }

    fn on_event(&mut self, ev: Event) {
        let now = std::time::Instant::now();
        match ev {
            Event::Added { entry_id, position, member, answer } => {
                let cmds = self.w.answer(entry_id, position, &member, answer);
                self.execute(cmds);
            }
            Event::AddedBatch { position, member, answers } => {
                for (entry_id, answer) in answers {
                    let cmds = self.w.answer(entry_id, position, &member, answer);
                    self.execute(cmds);
                }
            }
            Event::LacPublished { answer: Answer::Fenced, .. } => {
                let cmds = self.w.fenced();
                self.execute(cmds);
            }
            Event::LacPublished { position, member, lac, answer } => {
                self.w.lac_answered(position, &member, lac, &answer);
                self.answer_visible();
            }
            Event::EnsembleChanged(Ok(meta)) => {
                let seg = meta.last_segment().clone();
                self.set_meta(meta);
                let cmds = self.w.ensemble_changed(seg.first_entry_id, seg.members, now);
                self.execute(cmds);
                self.report_lost_copies();
            }
            Event::EnsembleChanged(Err(e)) => {
                tracing::warn!(ledger_id = self.meta.ledger_id, error = %e, "ensemble change failed");
                let reason = match e {
                    ClientError::LedgerFenced(_) => FailReason::Fenced,
                    ClientError::NotEnoughBookies(_) => FailReason::NotEnoughBookies,
                    _ => FailReason::MetadataUnavailable,
                };
                let cmds = self.w.abort(reason);
                self.execute(cmds);
            }
            Event::Closed(res) => {
                if let Ok(m) = &res {
                    self.set_meta(m.clone());
                    // Closed: its metadata shows every entry up to its end
                    // to any reader.
                    self.answer_invisible_through(m.last_entry_id);
                }
                for c in self.closers.drain(..) {
                    let _ = c.send(res.clone());
                }
                // Closed by us: copies refused meanwhile go again as
                // recovery adds. Otherwise the writer just stops.
                let cmds = if res.is_ok() { self.w.closed() } else { self.w.close() };
                self.close_result = Some(Box::new(res));
                self.execute(cmds);
                self.finished = true;
                self.report_lost_copies();
            }
            Event::Marked => {}
        }
    }

    /// Answers the acknowledged adds whose LAC is now stored on Qa bookies.
    fn answer_visible(&mut self) {
        self.answer_invisible_through(self.w.lac_visible());
    }

    /// Answers the acknowledged adds up to `last` (a visible LAC, or the end
    /// a close made known), in order.
    fn answer_invisible_through(&mut self, last: i64) {
        while self.invisible.front().is_some_and(|(id, _)| *id as i64 <= last) {
            let (id, r) = self.invisible.pop_front().expect("a front");
            let _ = r.send(Ok(Added { entry_id: id, lac: last }));
        }
    }

    fn set_meta(&mut self, meta: LedgerMeta) {
        let meta = Arc::new(meta);
        *self.shared.meta.lock().expect("meta lock") = meta.clone();
        self.meta = meta;
    }

    fn execute(&mut self, cmds: Vec<Command>) {
        let ledger_id = self.meta.ledger_id;
        for c in cmds {
            match c {
                Command::Send { position, member, entry, recovery } => {
                    self.outbox.push((position, member, entry, recovery));
                }
                Command::SendLac { position, member, lac } => {
                    let bookies = self.client.bookies().clone();
                    let version = self.meta.version;
                    self.tasks.get_or_insert_with(FuturesUnordered::new).push(Box::pin(async move {
                        let answer = bookies.write_lac(&member, ledger_id, lac, version).await;
                        Event::LacPublished { position, member, lac, answer }
                    }));
                }
                Command::Acknowledge { entry_ids, lac } => {
                    self.shared.lac.store(lac, Ordering::Release);
                    for id in entry_ids {
                        self.spans.remove(&id);
                        if let Some(r) = self.replies.remove(&id) {
                            if self.visible_acks {
                                self.invisible.push_back((id, r));
                            } else {
                                let _ = r.send(Ok(Added { entry_id: id, lac }));
                            }
                        }
                    }
                    self.answer_visible();
                }
                Command::ChangeEnsemble { failed, first_entry_id } => {
                    let client = self.client.clone();
                    let meta = LedgerMeta::clone(&self.meta);
                    tracing::info!(ledger_id, ?failed, first_entry_id, "bookie failed; changing ensemble");
                    self.tasks.get_or_insert_with(FuturesUnordered::new).push(Box::pin(async move {
                        Event::EnsembleChanged(change_ensemble(&client, meta, &failed, first_entry_id).await)
                    }));
                }
                Command::CopyLost { entry_id, member, .. } => {
                    self.shared.lost_copies.fetch_add(1, Ordering::AcqRel);
                    self.client.count_lost_copy();
                    tracing::warn!(
                        ledger_id,
                        entry_id,
                        bookie_id = %member.bookie_id,
                        "a copy of an acknowledged entry was not confirmed: the entry is below Qw copies"
                    );
                    self.lost_on.insert(member.bookie_id);
                    if self.finished {
                        self.report_lost_copies();
                    }
                }
                Command::Fail { reason, entry_ids } => {
                    let e = fail_error(&reason, ledger_id);
                    if reason != FailReason::Closed {
                        tracing::warn!(ledger_id, error = %e, failed_adds = entry_ids.len(), "writer stopped");
                    }
                    for id in entry_ids {
                        self.spans.remove(&id);
                        if let Some(r) = self.replies.remove(&id) {
                            let _ = r.send(Err(e.clone()));
                        }
                    }
                    // Acknowledged but not yet visible: their outcome is
                    // unknown to a reader now (a recovery keeps them; a
                    // close above shows them), so they fail with the rest.
                    for (_, r) in self.invisible.drain(..) {
                        let _ = r.send(Err(e.clone()));
                    }
                    if self.w.may_close().is_err() && reason != FailReason::Closed {
                        // Nothing can be closed by a writer that lost the ledger
                        // (one that only could not go on still closes it).
                        for c in self.closers.drain(..) {
                            let _ = c.send(Err(e.clone()));
                        }
                        if self.closing {
                            self.finished = true;
                        }
                    }
                }
            }
        }
    }

    /// Sends what this turn decided: per member, in entry order, one
    /// AddEntries request per batch (a lone add goes as AddEntry).
    fn flush(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        let timeout = self.client.options().add_timeout;
        let version = self.meta.version;
        // (position, member, recovery, entries, payload bytes)
        let mut by_member: Vec<(usize, Member, bool, Vec<Entry>, usize)> = Vec::new();
        for (position, member, entry, recovery) in self.outbox.drain(..) {
            let open = by_member.iter_mut().find(|(p, m, r, batch, bytes)| {
                *p == position
                    && *m == member
                    && *r == recovery
                    && batch.len() < BATCH_MAX_ADDS
                    && *bytes + entry.payload.len() <= BATCH_MAX_BYTES
            });
            match open {
                Some((_, _, _, batch, bytes)) => {
                    *bytes += entry.payload.len();
                    batch.push(entry);
                }
                None => {
                    let bytes = entry.payload.len();
                    by_member.push((position, member, recovery, vec![entry], bytes));
                }
            }
        }
        for (position, member, recovery, mut entries, _) in by_member {
            self.client.count_add_request(entries.len());
            let bookies = self.client.bookies().clone();
            // A request carrying traced adds joins the trace of the first of
            // them (one request has one parent).
            let span = match entries.iter().find_map(|e| self.spans.get(&e.entry_id)) {
                Some(parent) => tracing::info_span!(
                    parent: parent,
                    "bookie.add",
                    bookie = %member.bookie_id,
                    entries = entries.len(),
                    first_entry = entries[0].entry_id
                ),
                None => tracing::Span::none(),
            };
            if entries.len() == 1 {
                let entry = entries.pop().expect("one");
                let entry_id = entry.entry_id;
                self.tasks.get_or_insert_with(FuturesUnordered::new).push(Box::pin(tracing::Instrument::instrument(
                    async move {
                        let answer = bookies.add(&member, entry, version, recovery, timeout).await;
                        Event::Added { entry_id, position, member, answer }
                    },
                    span,
                )));
            } else {
                let ids: Vec<u64> = entries.iter().map(|e| e.entry_id).collect();
                self.tasks.get_or_insert_with(FuturesUnordered::new).push(Box::pin(tracing::Instrument::instrument(
                    async move {
                        let answers = bookies.add_batch(&member, entries, version, recovery, timeout).await;
                        Event::AddedBatch { position, member, answers: ids.into_iter().zip(answers).collect() }
                    },
                    span,
                )));
            }
        }
    }

    /// Marks the ledger under-replicated with the bookies that lost copies,
    /// once they no longer hold its last segment (a worker would otherwise
    /// wait for this writer, then recover the open ledger under it).
    fn report_lost_copies(&mut self) {
        let done = self.finished;
        let last = &self.meta.last_segment().members;
        let ready: Vec<String> =
            self.lost_on.iter().filter(|b| done || !last.iter().any(|m| &m.bookie_id == *b)).cloned().collect();
        if ready.is_empty() {
            return;
        }
        self.lost_on.retain(|b| !ready.contains(b));
        let (client, ledger_id) = (self.client.clone(), self.meta.ledger_id);
        self.tasks.get_or_insert_with(FuturesUnordered::new).push(Box::pin(async move {
            let req = quire_proto::v1::MarkUnderReplicatedRequest {
                ledger_id,
                missing_bookie_ids: ready.clone(),
                reason: "writer: copies of acknowledged entries not confirmed".into(),
            };
            if let Err(e) = client.meta().call(req).await {
                // The auditor's replica check finds the holes all the same.
                tracing::warn!(ledger_id, error = %e, bookies = ?ready, "could not mark the ledger under-replicated");
            }
            Event::Marked
        }));
    }

    fn start_close(&mut self) {
        self.close_sent = true;
        self.w.start_closing();
        if let Err(r) = self.w.may_close() {
            let e = fail_error(&r, self.meta.ledger_id);
            for c in self.closers.drain(..) {
                let _ = c.send(Err(e.clone()));
            }
            self.finished = true;
            return;
        }
        let client = self.client.clone();
        let meta = LedgerMeta::clone(&self.meta);
        let (lac, length) = (self.w.lac(), self.w.length());
        if let Some(closer) = self.closing_by.take() {
            let mut intended = meta.clone();
            intended.state = LedgerState::Closed;
            intended.last_entry_id = lac;
            intended.length = length;
            let written = closer(meta, intended);
            self.tasks
                .get_or_insert_with(FuturesUnordered::new)
                .push(Box::pin(async move { Event::Closed(written.await) }));
            return;
        }
        self.tasks
            .get_or_insert_with(FuturesUnordered::new)
            .push(Box::pin(async move { Event::Closed(close_ledger(&client, meta, lac, length).await) }));
    }
}

/// Closes an open ledger at `lac` by CAS. A conflict is settled by the stored
/// record: closed at the same point is success; recovered or closed anywhere
/// else means this writer was fenced out.
async fn close_ledger(client: &Client, mut meta: LedgerMeta, lac: i64, length: u64) -> Result<LedgerMeta, ClientError> {
    loop {
        let mut intended = meta.clone();
        intended.state = LedgerState::Closed;
        intended.last_entry_id = lac;
        intended.length = length;
        match client.cas(&meta, &intended).await? {
            Ok(stored) => {
                tracing::info!(ledger_id = meta.ledger_id, last_entry_id = lac, length, "closed ledger");
                return Ok(stored);
            }
            Err(stored) if stored.state == LedgerState::Closed && stored.last_entry_id == lac => return Ok(stored),
            Err(stored) => match writer_conflict(&meta, &stored) {
                Conflict::Fenced => return Err(ClientError::LedgerFenced(meta.ledger_id)),
                Conflict::Retry(_) => meta = stored,
            },
        }
    }
}
