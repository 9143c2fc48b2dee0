//! The ledger writer as a state machine.
//!
//! Striping: entry `e` goes to the write set of `Qw` consecutive ensemble
//! positions starting at `e mod E`. An add is *acknowledged* when `Qa` bookies
//! of its write set have confirmed it AND every lower entry is acknowledged;
//! acknowledgements therefore leave in entry order, and the LAC is the highest
//! acknowledged entry. Every entry carries the LAC as of its sending.
//!
//! A bookie that fails (error, timeout, or an answer from another instance
//! than the one in the ensemble: seed 003) is replaced by an ensemble change:
//! the new ensemble starts at the first unacknowledged entry, and the pending
//! entries whose write sets included the failed position are sent again to
//! the replacement. The metadata update is the shell's job (CAS); it reports
//! back with [`Writer::ensemble_changed`] or [`Writer::fenced`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quire_proto::v1::Entry;

/// Quorum sizes of a ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quorums {
    /// E: bookies in the ensemble.
    pub ensemble: usize,
    /// Qw: copies of each entry.
    pub write: usize,
    /// Qa: confirmations to acknowledge.
    pub ack: usize,
}

impl Quorums {
    /// Checks 1 <= Qa <= Qw <= E <= 64.
    pub fn new(ensemble: usize, write: usize, ack: usize) -> Option<Quorums> {
        (1 <= ack && ack <= write && write <= ensemble && ensemble <= 64).then_some(Quorums { ensemble, write, ack })
    }

    /// The write set of `entry_id` as a bit per ensemble position.
    pub fn write_mask(&self, entry_id: u64) -> u64 {
        let start = (entry_id % self.ensemble as u64) as usize;
        (0..self.write).fold(0, |m, i| m | 1u64 << ((start + i) % self.ensemble))
    }

    /// The ensemble positions that store `entry_id`.
    pub fn write_set(&self, entry_id: u64) -> Vec<usize> {
        let start = (entry_id % self.ensemble as u64) as usize;
        (0..self.write).map(|i| (start + i) % self.ensemble).collect()
    }
}

/// A member of an ensemble, as the writer knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    /// Bookie id.
    pub bookie_id: String,
    /// The instance the writer expects to answer (from the registry). An
    /// answer from any other instance is a failure, never a success.
    pub instance_id: String,
}

/// What the writer asks its shell to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Send `entry` to the bookie at ensemble `position`.
    Send {
        /// Ensemble position.
        position: usize,
        /// The member there (and the instance it must be).
        member: Member,
        /// The entry, sealed with its digest.
        entry: Entry,
        /// A recovery add (accepted on a fenced ledger).
        recovery: bool,
    },
    /// Publish the LAC to the bookie at `position` (an idle writer's explicit LAC).
    SendLac {
        /// Ensemble position.
        position: usize,
        /// The member there.
        member: Member,
        /// The LAC.
        lac: i64,
    },
    /// These adds are acknowledged, in order; the LAC is now `lac`.
    Acknowledge {
        /// Entry ids, ascending and contiguous.
        entry_ids: Vec<u64>,
        /// The new LAC.
        lac: i64,
    },
    /// Replace the members at `failed` positions, from entry `first_entry_id`
    /// on (update the metadata by CAS, then call `ensemble_changed`).
    ChangeEnsemble {
        /// Positions to replace.
        failed: Vec<usize>,
        /// First entry of the new ensemble.
        first_entry_id: u64,
    },
    /// A copy of an acknowledged entry sent to this member was not
    /// confirmed (failed, timed out, another instance, refused): the entry
    /// has fewer than Qw copies until re-replication restores it (the
    /// shell reports it: counted, and the ledger marked under-replicated).
    CopyLost {
        /// The entry.
        entry_id: u64,
        /// Its position in the ensemble that names the member.
        position: usize,
        /// The member that did not confirm it.
        member: Member,
    },
    /// The ledger can take no more adds: every pending add failed with this.
    Fail {
        /// Why.
        reason: FailReason,
        /// The adds that failed, ascending.
        entry_ids: Vec<u64>,
    },
}

/// Why adds failed for good.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FailReason {
    /// The ledger was fenced or closed by someone else (recovery): this writer is done.
    Fenced,
    /// The writer was closed.
    Closed,
    /// No bookie could replace a failed one.
    NotEnoughBookies,
    /// The metadata service could not record an ensemble change.
    MetadataUnavailable,
}

/// Why an add was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    /// `max_pending` adds are already in flight: wait for acknowledgements.
    #[error("{0} adds pending; wait for acknowledgements")]
    Backpressure(usize),
    /// The writer has failed or closed.
    #[error("writer is {0:?}")]
    Done(FailReason),
}

/// How a bookie answered an add.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Stored; `instance_id` answered.
    Stored {
        /// The instance id in the response.
        instance_id: String,
    },
    /// The ledger is fenced on that bookie.
    Fenced,
    /// The bookie is up but could not take the add yet: it could not ask
    /// the metadata service about the ledger (a leader election). Not a
    /// failure of the bookie: the add goes to it again at the next tick, and
    /// its add timeout runs from then (issue #19 item 7: a metadata
    /// failover must never cost a bookie).
    Unavailable,
    /// Any other failure (unreachable, timeout, read-only, corrupt...).
    Failed,
}

/// How a writer behaves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WriterOptions {
    /// Adds in flight before [`AddError::Backpressure`].
    pub max_pending: usize,
    /// An add unanswered this long counts its silent bookies as failed.
    pub add_timeout: Duration,
    /// When idle this long with an unpublished LAC, send it explicitly.
    pub explicit_lac_interval: Duration,
    /// Recovery's writer: sends are recovery adds (accepted on a fenced ledger).
    pub recovery: bool,
    /// Read your writes (issue #47): the shell answers an add only once a
    /// reader that starts then sees it, that is once its LAC is stored on
    /// Qa bookies ([`Writer::lac_visible`]). So the LAC goes out as soon
    /// as it moves and nothing taken since carries it
    /// ([`Writer::publish_lac_now`]), not after an idle interval.
    pub visible_acks: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            max_pending: 1024,
            add_timeout: Duration::from_secs(5),
            explicit_lac_interval: Duration::from_millis(100),
            recovery: false,
            visible_acks: false,
        }
    }
}

/// An acknowledged entry whose other copies are still on their way: a
/// close, or a fence answered to one of them, never cancels them (issue
/// #19 item 6). Holds a clone of the entry (its payload shares the bytes of
/// the requests in flight); positions are bits, and the member at each is
/// the one the entry's segment names (ensembles only change after it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Copies {
    entry: Entry,
    /// Positions whose answer is awaited.
    awaited: u64,
    /// Positions whose copy went again as a recovery add (never re-sent twice).
    resent: u64,
    /// Positions that refused it as fenced while this writer's own close
    /// was under way: re-sent as recovery adds once the close succeeded.
    refused: u64,
    /// Positions that answered [`Answer::Unavailable`]: sent again at the
    /// next tick (still awaited).
    deferred: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pending {
    /// Sealed once, at add: resends carry the same bytes, LAC and digest.
    entry: Entry,
    /// Positions that stored it, a bit each.
    confirmed: u64,
    sent_at: Instant,
    /// Positions that answered [`Answer::Unavailable`], to send again at
    /// the next tick; no add timeout runs for them meanwhile.
    deferred: u64,
    /// Positions sent again after such an answer: their add timeout runs
    /// from `resent_at`, not `sent_at`.
    resent: u64,
    resent_at: Instant,
}

/// The writer of one ledger.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Writer {
    ledger_id: u64,
    quorums: Quorums,
    /// Ensembles by first entry id, ascending; the last is current. A
    /// sorted vector: a B-tree's node is 384 bytes for the one ensemble
    /// most ledgers ever have (an idle writer is held per open ledger).
    ensembles: Vec<(u64, Vec<Member>)>,
    next_entry_id: u64,
    lac: i64,
    /// Ledger length up to the LAC.
    length: u64,
    /// Ledger length up to the last entry added.
    length_added: u64,
    /// The highest LAC any bookie has been sent (piggybacked or explicit).
    lac_published: i64,
    /// The highest LAC stored on Qa bookies: carried by an acknowledged
    /// add, or sent alone and stored by Qa members. A reader that asks the
    /// last ensemble's members and hears E - Qa + 1 of them hears one of
    /// those (`LedgerReader::read_lac_fresh`).
    lac_visible: i64,
    /// The highest LAC each position of the current ensemble confirmed it
    /// stored when sent alone (empty until the first such answer). A
    /// member that stored v knows every LAC below: answers of earlier
    /// sends still count when a later one is under way.
    lac_stored: Vec<i64>,
    /// The last LAC sent alone, and the positions that answered it: once
    /// all did and it is still not visible, it may go again.
    lac_publishing: Option<(i64, u64)>,
    last_activity: Option<Instant>,
    pending: BTreeMap<u64, Pending>,
    opts: WriterOptions,
    /// Positions of the current ensemble known failed, awaiting replacement.
    failed: BTreeSet<usize>,
    changing: bool,
    done: Option<FailReason>,
    /// Acknowledged entries with copies still awaited, by entry id.
    copies: BTreeMap<u64, Copies>,
    /// The shell is closing the ledger (no add pending, none accepted): a
    /// fence answered now may be the bookies' own guard meeting our close,
    /// so it decides nothing; the close's CAS does.
    closing: bool,
    /// Our own close succeeded.
    closed_ok: bool,
    /// Copies of acknowledged entries that were not confirmed.
    lost_copies: u64,
}

impl Writer {
    /// A writer for a new (empty) ledger with its first ensemble.
    pub fn new(ledger_id: u64, quorums: Quorums, ensemble: Vec<Member>, opts: WriterOptions) -> Writer {
        Writer::resume(ledger_id, quorums, BTreeMap::from([(0, ensemble)]), -1, 0, opts)
    }

    /// A writer that continues a ledger whose entries up to `lac` (of total
    /// length `length`) are acknowledged: recovery's write-back. Its entries
    /// all belong to the last ensemble.
    pub fn resume(
        ledger_id: u64,
        quorums: Quorums,
        ensembles: BTreeMap<u64, Vec<Member>>,
        lac: i64,
        length: u64,
        opts: WriterOptions,
    ) -> Writer {
        let (&last_first, current) = ensembles.iter().next_back().expect("a ledger has an ensemble");
        assert_eq!(current.len(), quorums.ensemble, "ensemble size");
        assert!(lac + 1 >= last_first as i64, "entries past the LAC belong to the last ensemble");
        Writer {
            ledger_id,
            quorums,
            ensembles: ensembles.into_iter().collect(),
            next_entry_id: (lac + 1) as u64,
            lac,
            length,
            length_added: length,
            lac_published: lac,
            lac_visible: lac,
            lac_stored: Vec::new(),
            lac_publishing: None,
            last_activity: None,
            pending: BTreeMap::new(),
            opts: WriterOptions { max_pending: opts.max_pending.max(1), ..opts },
            failed: BTreeSet::new(),
            changing: false,
            done: None,
            copies: BTreeMap::new(),
            closing: false,
            closed_ok: false,
            lost_copies: 0,
        }
    }

    /// The highest acknowledged entry (-1: none).
    /// The highest LAC stored on Qa bookies (at most [`Writer::lac`]):
    /// every entry up to it is acknowledged and a reader sees it.
    pub fn lac_visible(&self) -> i64 {
        self.lac_visible
    }

    pub fn lac(&self) -> i64 {
        self.lac
    }

    /// Payload bytes of the acknowledged entries.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Adds in flight.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The entry id the next add gets.
    pub fn next_entry_id(&self) -> u64 {
        self.next_entry_id
    }

    /// Whether an ensemble change is under way.
    pub fn changing(&self) -> bool {
        self.changing
    }

    /// Why the writer stopped, if it did.
    pub fn done(&self) -> Option<&FailReason> {
        self.done.as_ref()
    }

    /// Copies of acknowledged entries still awaited (a close waits for
    /// none of them, but must not cancel them).
    pub fn copies_in_flight(&self) -> usize {
        self.copies.values().map(|c| c.awaited.count_ones() as usize).sum()
    }

    /// Gives back what collections kept from a busy spell (an emptied
    /// B-tree keeps its root node): for a writer about to sit idle.
    pub fn release_idle_memory(&mut self) {
        if self.pending.is_empty() {
            self.pending = BTreeMap::new();
        }
        if self.copies.is_empty() {
            self.copies = BTreeMap::new();
        }
        if self.failed.is_empty() {
            self.failed = BTreeSet::new();
        }
    }

    /// The member at `position` of the segment holding `entry_id`.
    fn member_of(&self, entry_id: u64, position: usize) -> &Member {
        // Segment 0 starts at entry 0, so some segment starts at or before it.
        let i = self.ensembles.partition_point(|(first, _)| *first <= entry_id);
        &self.ensembles[i.checked_sub(1).expect("segment 0 holds every entry")].1[position]
    }

    /// Copies of acknowledged entries that were sent and never confirmed.
    pub fn lost_copies(&self) -> u64 {
        self.lost_copies
    }

    fn current(&self) -> (u64, &Vec<Member>) {
        let (first, members) = self.ensembles.last().expect("a writer always has an ensemble");
        (*first, members)
    }

    fn sends(&self, entry_id: u64, positions: impl IntoIterator<Item = usize>) -> Vec<Command> {
        let p = &self.pending[&entry_id];
        let (_, members) = self.current();
        positions
            .into_iter()
            .filter(|pos| !self.failed.contains(pos))
            .map(|position| Command::Send {
                position,
                member: members[position].clone(),
                entry: p.entry.clone(),
                recovery: self.opts.recovery,
            })
            .collect()
    }

    fn admit(&self) -> Result<(), AddError> {
        if let Some(r) = &self.done {
            return Err(AddError::Done(r.clone()));
        }
        if self.closing {
            return Err(AddError::Done(FailReason::Closed));
        }
        if self.pending.len() >= self.opts.max_pending {
            return Err(AddError::Backpressure(self.pending.len()));
        }
        Ok(())
    }

    fn enqueue(&mut self, entry: Entry, now: Instant) -> (u64, Vec<Command>) {
        let id = entry.entry_id;
        debug_assert_eq!(id, self.next_entry_id);
        self.next_entry_id += 1;
        self.length_added = entry.ledger_length;
        self.lac_published = self.lac_published.max(entry.last_add_confirmed);
        self.last_activity = Some(now);
        self.pending.insert(id, Pending { entry, confirmed: 0, sent_at: now, deferred: 0, resent: 0, resent_at: now });
        // During an ensemble change, sends go out when the new ensemble is known.
        let cmds = if self.changing { Vec::new() } else { self.sends(id, self.quorums.write_set(id)) };
        (id, cmds)
    }

    /// Accepts an add: assigns its entry id and sends it to its write set.
    pub fn add(&mut self, payload: Bytes, now: Instant) -> Result<(u64, Vec<Command>), AddError> {
        self.admit()?;
        let id = self.next_entry_id;
        let length = self.length_added + payload.len() as u64;
        let entry = Entry::sealed_at(self.ledger_id, id, self.lac, length, payload);
        Ok(self.enqueue(entry, now))
    }

    /// Recovery's write-back: re-adds an entry exactly as it was read (its
    /// bytes, LAC, length and digest), which must be the next entry id.
    pub fn add_recovered(&mut self, entry: Entry, now: Instant) -> Result<Vec<Command>, AddError> {
        self.admit()?;
        assert!(self.opts.recovery, "only recovery re-adds entries");
        assert_eq!(entry.entry_id, self.next_entry_id, "recovered entries are re-added in order");
        assert!(entry.digest_ok() && entry.ledger_id == self.ledger_id, "recovered entries are verified first");
        Ok(self.enqueue(entry, now).1)
    }

    /// A bookie answered an add of `entry_id` sent to `position`.
    pub fn answer(&mut self, entry_id: u64, position: usize, member: &Member, answer: Answer) -> Vec<Command> {
        let mut out = self.copy_answered(entry_id, position, member, &answer);
        if self.done.is_some() || self.closing {
            return out;
        }
        out.extend(self.judge(entry_id, position, member, answer));
        out
    }

    /// The copy bookkeeping of an answer about an acknowledged entry.
    fn copy_answered(&mut self, entry_id: u64, position: usize, member: &Member, answer: &Answer) -> Vec<Command> {
        let bit = 1u64 << position;
        let awaited = self.copies.get(&entry_id).is_some_and(|c| c.awaited & bit != 0);
        if !awaited || self.member_of(entry_id, position) != member {
            return Vec::new();
        }
        let (closing, closed_ok) = (self.closing, self.closed_ok);
        let c = self.copies.get_mut(&entry_id).expect("checked");
        c.awaited &= !bit;
        let resent = c.resent & bit != 0;
        let mut out = Vec::new();
        match answer {
            Answer::Stored { instance_id } if *instance_id == member.instance_id || member.instance_id.is_empty() => {}
            // Sent again at the next tick while the writer runs; a writer
            // that is closing or done sends nothing more (lost below).
            Answer::Unavailable if !closing && self.done.is_none() => {
                c.awaited |= bit;
                c.deferred |= bit;
                return out;
            }
            // Our own close met a bookie that had not seen the ledger yet
            // (its guard found it closed): the copy goes again as a recovery
            // add once the close has succeeded (at once if it has).
            // (Unavailable alike: the guard could not ask the metadata service.)
            Answer::Fenced | Answer::Unavailable if closing && !resent => c.refused |= bit,
            Answer::Fenced if closed_ok && !resent => {
                out.push(Command::Send { position, member: member.clone(), entry: c.entry.clone(), recovery: true });
                c.awaited |= bit;
                c.resent |= bit;
            }
            _ => {
                self.lost_copies += 1;
                out.push(Command::CopyLost { entry_id, position, member: member.clone() });
            }
        }
        let c = &self.copies[&entry_id];
        if c.awaited == 0 && c.refused == 0 {
            self.copies.remove(&entry_id);
        }
        out
    }

    /// What an answer means for the pending adds and the ensemble.
    fn judge(&mut self, entry_id: u64, position: usize, member: &Member, answer: Answer) -> Vec<Command> {
        // A fence is a fact about the ledger, whichever entry reported it, even
        // one already acknowledged: nothing may be acknowledged after it.
        if answer == Answer::Fenced {
            return self.fenced();
        }
        // An answer from a member that is no longer at that position (replaced
        // meanwhile) says nothing about the current ensemble.
        let (first, members) = self.current();
        if members.get(position) != Some(member) {
            return Vec::new();
        }
        let failure = match &answer {
            Answer::Stored { instance_id } => !(instance_id == &member.instance_id || member.instance_id.is_empty()),
            Answer::Failed => true,
            Answer::Fenced | Answer::Unavailable => false,
        };
        if !self.pending.contains_key(&entry_id) {
            // Acknowledged at Qa without this bookie, which has now failed it:
            // still a failed member, replaced before it misses more entries
            // (the copies it missed are the auditor's to restore).
            if failure && entry_id >= first {
                return self.bookie_failed(position);
            }
            return Vec::new();
        }
        match answer {
            // An empty expected instance id is an unknown one (metadata written
            // without instance ids): the bookie's own guard is then all there is.
            // A member being replaced: its copy will not be in the metadata.
            Answer::Stored { .. } if self.failed.contains(&position) => Vec::new(),
            Answer::Stored { .. } if !failure => {
                self.pending.get_mut(&entry_id).expect("checked").confirmed |= 1 << position;
                self.acknowledge()
            }
            // Seed 003: another process at the old address is a failed bookie.
            Answer::Stored { .. } | Answer::Failed => self.bookie_failed(position),
            Answer::Fenced => self.fenced(),
            Answer::Unavailable if self.failed.contains(&position) => Vec::new(),
            Answer::Unavailable => {
                let p = self.pending.get_mut(&entry_id).expect("checked");
                p.deferred |= 1 << position;
                p.resent &= !(1 << position);
                Vec::new()
            }
        }
    }

    fn acknowledge(&mut self) -> Vec<Command> {
        // Nothing is acknowledged while an ensemble change is under way: the
        // new ensemble starts at the first unacknowledged entry as computed
        // when the change began, and an entry acknowledged meanwhile on a
        // failed member's copy would be described by metadata that no longer
        // names that member (BookKeeper holds acks the same way; the
        // simulator found this, seed 92).
        if self.changing {
            return Vec::new();
        }
        let mut acked = Vec::new();
        while let Some((&id, p)) = self.pending.iter().next() {
            let confirmed = (p.confirmed & self.quorums.write_mask(id)).count_ones() as usize;
            if confirmed < self.quorums.ack {
                break;
            }
            assert_eq!(id as i64, self.lac + 1, "acknowledgements leave in entry order");
            let p = self.pending.remove(&id).expect("first pending");
            self.lac = id as i64;
            // Stored on Qa bookies with the entry (a bookie raises its LAC
            // to what an add carries).
            self.lac_visible = self.lac_visible.max(p.entry.last_add_confirmed);
            self.length = p.entry.ledger_length;
            let awaited = self.quorums.write_mask(id) & !p.confirmed;
            if awaited != 0 {
                self.copies.insert(id, Copies { entry: p.entry, awaited, resent: 0, refused: 0, deferred: 0 });
            }
            acked.push(id);
        }
        if acked.is_empty() {
            Vec::new()
        } else {
            vec![Command::Acknowledge { entry_ids: acked, lac: self.lac }]
        }
    }

    fn bookie_failed(&mut self, position: usize) -> Vec<Command> {
        // A closing writer has no add pending and takes none: a new
        // ensemble would serve nothing, and its CAS would race the close's.
        // The copies the member missed are already counted lost.
        if self.closing || !self.failed.insert(position) || self.changing {
            return Vec::new();
        }
        self.changing = true;
        let first = self.pending.keys().next().copied().unwrap_or(self.next_entry_id);
        vec![Command::ChangeEnsemble { failed: self.failed.iter().copied().collect(), first_entry_id: first }]
    }

    /// Whether time can change anything. While it cannot, [`Writer::tick`]
    /// at any instant sends nothing and changes nothing, so a shell need
    /// not call it: an idle writer costs no timer (issue #46 item 1:
    /// 30 000 idle writers ticking every 50 ms took a core). Time matters
    /// while adds are pending (their timeout), copies wait to be sent again,
    /// or the LAC has not been published.
    pub fn wants_tick(&self) -> bool {
        if !self.closing && self.copies.values().any(|c| c.deferred != 0) {
            return true;
        }
        if self.done.is_some() || self.changing {
            return false;
        }
        !self.pending.is_empty()
            || (self.lac > self.lac_published && !self.opts.recovery)
            || (self.opts.visible_acks && self.lac > self.lac_visible)
    }

    /// Time passes: adds older than the add timeout count their silent bookies
    /// as failed; an idle writer publishes its LAC explicitly.
    pub fn tick(&mut self, now: Instant) -> Vec<Command> {
        let mut out = self.resend_deferred_copies();
        if self.done.is_some() || self.changing {
            return out;
        }
        let timeout = self.opts.add_timeout;
        let mut late = BTreeSet::new();
        for (&id, p) in &self.pending {
            // resent_at >= sent_at: an entry sent less than a timeout ago has
            // no late position (the common case: one comparison).
            if now.saturating_duration_since(p.sent_at) < timeout {
                continue;
            }
            let unheard = self.quorums.write_mask(id) & !p.confirmed & !p.deferred;
            let mut late_bits = unheard & !p.resent;
            if now.saturating_duration_since(p.resent_at) >= timeout {
                late_bits |= unheard & p.resent;
            }
            late.extend((0..self.quorums.ensemble).filter(|pos| late_bits & (1 << pos) != 0));
        }
        if late.is_empty() {
            out.extend(self.resend_deferred(now));
            out.extend(self.publish_lac(now));
            return out;
        }
        self.failed.extend(late);
        self.changing = true;
        let first = self.pending.keys().next().copied().unwrap_or(self.next_entry_id);
        out.push(Command::ChangeEnsemble { failed: self.failed.iter().copied().collect(), first_entry_id: first });
        out
    }

    /// Pending adds a member answered [`Answer::Unavailable`] go to it
    /// again; their add timeout starts over.
    fn resend_deferred(&mut self, now: Instant) -> Vec<Command> {
        let ids: Vec<(u64, u64)> =
            self.pending.iter().filter(|(_, p)| p.deferred != 0).map(|(id, p)| (*id, p.deferred)).collect();
        let mut out = Vec::new();
        for (id, bits) in ids {
            let p = self.pending.get_mut(&id).expect("listed");
            p.deferred = 0;
            p.resent |= bits;
            p.resent_at = now;
            out.extend(self.sends(id, (0..self.quorums.ensemble).filter(|pos| bits & (1 << pos) != 0)));
        }
        out
    }

    /// Copies of acknowledged entries a member answered
    /// [`Answer::Unavailable`] go to it again while the writer runs; once it
    /// is done they are lost (counted, and marked for repair); a close that
    /// succeeds sends them as recovery adds instead.
    fn resend_deferred_copies(&mut self) -> Vec<Command> {
        // While our close is under way, its outcome decides (`closed`, `close`).
        if self.closing {
            return Vec::new();
        }
        let stopping = self.done.is_some();
        let ids: Vec<(u64, u64)> =
            self.copies.iter().filter(|(_, c)| c.deferred != 0).map(|(id, c)| (*id, c.deferred)).collect();
        let mut out = Vec::new();
        for (id, bits) in ids {
            for position in (0..self.quorums.ensemble).filter(|p| bits & (1 << p) != 0) {
                let member = self.member_of(id, position).clone();
                let c = self.copies.get_mut(&id).expect("listed");
                c.deferred &= !(1 << position);
                if stopping {
                    c.awaited &= !(1 << position);
                    self.lost_copies += 1;
                    out.push(Command::CopyLost { entry_id: id, position, member });
                } else {
                    let recovery = self.opts.recovery;
                    out.push(Command::Send { position, member, entry: c.entry.clone(), recovery });
                }
            }
            let c = &self.copies[&id];
            if c.awaited == 0 && c.refused == 0 {
                self.copies.remove(&id);
            }
        }
        out
    }

    /// Readers learn the LAC from the entries that carry it, so after the last
    /// add it would lag by one until the next: an idle writer sends it alone.
    fn publish_lac(&mut self, now: Instant) -> Vec<Command> {
        if self.opts.visible_acks {
            return self.publish_lac_now();
        }
        let idle =
            self.last_activity.is_none_or(|t| now.saturating_duration_since(t) >= self.opts.explicit_lac_interval);
        if !self.pending.is_empty() || self.lac <= self.lac_published || !idle || self.opts.recovery {
            return Vec::new();
        }
        self.last_activity = Some(now);
        self.send_lac()
    }

    /// With [`WriterOptions::visible_acks`]: sends the LAC alone to every
    /// member, now, when it moved past what any add or earlier send carried
    /// (a shell calls this when it has no add to send that would carry it).
    /// Nothing otherwise.
    pub fn publish_lac_now(&mut self) -> Vec<Command> {
        if !self.opts.visible_acks
            || self.opts.recovery
            || self.done.is_some()
            || self.changing
            || self.closing
            || self.lac <= self.lac_published
        {
            return Vec::new();
        }
        self.send_lac()
    }

    fn send_lac(&mut self) -> Vec<Command> {
        self.lac_published = self.lac;
        self.lac_publishing = Some((self.lac, 0));
        let (_, members) = self.current();
        members
            .iter()
            .enumerate()
            .map(|(position, member)| Command::SendLac { position, member: member.clone(), lac: self.lac })
            .collect()
    }

    /// The member at `position` answered the LAC `lac` sent alone. Stored
    /// by Qa members of the current ensemble, it is visible. A round that
    /// every member answered short of Qa is sent again (the next tick, or
    /// [`Writer::publish_lac_now`]). A fence is the shell's to report
    /// ([`Writer::fenced`]).
    pub fn lac_answered(&mut self, position: usize, member: &Member, lac: i64, answer: &Answer) {
        if self.current().1.get(position) != Some(member) {
            return;
        }
        let stored = matches!(answer, Answer::Stored { instance_id } if *instance_id == member.instance_id || member.instance_id.is_empty());
        if stored {
            if self.lac_stored.len() != self.quorums.ensemble {
                self.lac_stored = vec![-1; self.quorums.ensemble];
            }
            self.lac_stored[position] = self.lac_stored[position].max(lac);
            // The highest LAC stored on Qa members (E is small: a count
            // per member, no allocation on every answer).
            let ack = self.quorums.ack;
            let stored_on_qa = self
                .lac_stored
                .iter()
                .copied()
                .filter(|v| self.lac_stored.iter().filter(|w| *w >= v).count() >= ack)
                .max();
            if let Some(v) = stored_on_qa {
                self.lac_visible = self.lac_visible.max(v);
            }
        }
        if let Some((value, answered)) = self.lac_publishing.as_mut() {
            if *value == lac {
                *answered |= 1u64 << position;
                if answered.count_ones() as usize == self.quorums.ensemble {
                    let value = *value;
                    self.lac_publishing = None;
                    if self.lac_visible < value {
                        // Every member answered, short of Qa: again.
                        self.lac_published = self.lac_visible;
                    }
                }
            }
        }
        debug_assert!(self.lac_visible <= self.lac, "nothing unacknowledged is visible");
    }

    /// The metadata now has a new ensemble from `first_entry_id` on: resend
    /// every pending entry to the positions that changed (and any not yet sent).
    pub fn ensemble_changed(&mut self, first_entry_id: u64, members: Vec<Member>, now: Instant) -> Vec<Command> {
        assert_eq!(members.len(), self.quorums.ensemble, "ensemble size");
        if self.done.is_some() {
            return Vec::new();
        }
        let (_, old) = self.current();
        let changed: BTreeSet<usize> = (0..members.len()).filter(|i| old[*i] != members[*i]).collect();
        assert!(
            self.pending.keys().next().is_none_or(|p| *p >= first_entry_id),
            "a new ensemble never covers acknowledged entries"
        );
        match self.ensembles.binary_search_by_key(&first_entry_id, |(first, _)| *first) {
            Ok(i) => self.ensembles[i].1 = members,
            Err(i) => self.ensembles.insert(i, (first_entry_id, members)),
        }
        self.failed.clear();
        self.changing = false;
        // A LAC sent alone to the old members counts no more; what is not
        // visible yet goes to the new ones.
        if self.opts.visible_acks {
            self.lac_publishing = None;
            self.lac_published = self.lac_published.min(self.lac_visible);
            for p in &changed {
                if let Some(l) = self.lac_stored.get_mut(*p) {
                    *l = -1;
                }
            }
        }
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        let mut out = Vec::new();
        for id in ids {
            let p = self.pending.get_mut(&id).expect("listed");
            // Confirmations from replaced members no longer count.
            p.confirmed &= !changed.iter().fold(0u64, |m, c| m | 1 << c);
            p.sent_at = now;
            // Every unconfirmed position is sent now (deferred ones too).
            p.deferred = 0;
            p.resent = 0;
            let missing: Vec<usize> = self
                .quorums
                .write_set(id)
                .into_iter()
                .filter(|pos| self.pending[&id].confirmed & (1 << pos) == 0)
                .collect();
            out.extend(self.sends(id, missing));
        }
        // Replacing a member can complete entries whose other copies were in.
        out.extend(self.acknowledge());
        out
    }

    /// The ledger was fenced or closed under us (a bookie said so, or the
    /// metadata CAS found it): every pending and later add fails. While our
    /// own close is under way a bookie's fence decides nothing (its guard
    /// may have met our close): the close's outcome does.
    pub fn fenced(&mut self) -> Vec<Command> {
        if self.closing {
            return Vec::new();
        }
        // (Refused copies exist only while closing: nothing to count here.)
        self.copies.clear();
        self.finish(FailReason::Fenced)
    }

    /// The shell starts closing the ledger by CAS (no add is pending; none
    /// is taken from now on). Until [`Writer::closed`] or
    /// [`Writer::close`], fences answered to copies are held, not judged.
    pub fn start_closing(&mut self) {
        debug_assert!(self.pending.is_empty(), "a close waits for every pending add");
        self.closing = true;
    }

    /// Our close succeeded: the writer is done. Copies refused as fenced
    /// meanwhile (bookies that met the ledger first after the close) go
    /// again as recovery adds, which a closed ledger takes (issue #19 item
    /// 5/6): the close cancels no copy of an acknowledged entry.
    pub fn closed(&mut self) -> Vec<Command> {
        self.closing = false;
        self.closed_ok = true;
        let mut out = self.finish(FailReason::Closed);
        // (A writer that had stopped for want of a bookie is closed now.)
        self.done = Some(FailReason::Closed);
        let refused: Vec<(u64, u64)> =
            self.copies.iter().map(|(id, c)| (*id, c.refused | c.deferred)).filter(|(_, r)| *r != 0).collect();
        for (id, bits) in refused {
            for position in (0..self.quorums.ensemble).filter(|p| bits & (1 << p) != 0) {
                let member = self.member_of(id, position).clone();
                let c = self.copies.get_mut(&id).expect("listed");
                out.push(Command::Send { position, member, entry: c.entry.clone(), recovery: true });
                c.awaited |= 1 << position;
                c.resent |= 1 << position;
            }
            let c = self.copies.get_mut(&id).expect("listed");
            c.refused = 0;
            c.deferred = 0;
        }
        out
    }

    /// Closes the writer without a successful close of the ledger (it
    /// failed, or was never tried): pending adds fail with `Closed`; copies
    /// refused as fenced are lost.
    pub fn close(&mut self) -> Vec<Command> {
        self.closing = false;
        let mut out = self.lose_refused();
        out.extend(self.finish(FailReason::Closed));
        out
    }

    /// Counts the refused copies as lost.
    fn lose_refused(&mut self) -> Vec<Command> {
        let mut out = Vec::new();
        for (&entry_id, c) in &self.copies {
            for position in (0..self.quorums.ensemble).filter(|p| (c.refused | c.deferred) & (1 << p) != 0) {
                out.push(Command::CopyLost { entry_id, position, member: self.member_of(entry_id, position).clone() });
            }
        }
        self.lost_copies += out.len() as u64;
        for c in self.copies.values_mut() {
            c.awaited &= !c.deferred;
            c.refused = 0;
            c.deferred = 0;
        }
        self.copies.retain(|_, c| c.awaited != 0);
        out
    }

    /// The writer cannot go on (no replacement bookie, metadata unreachable):
    /// pending adds fail with `reason`. The ensemble change is over.
    pub fn abort(&mut self, reason: FailReason) -> Vec<Command> {
        self.changing = false;
        self.finish(reason)
    }

    /// Whether the shell may still close the ledger at [`Writer::lac`]:
    /// yes unless someone else holds it (fenced) or it is closed already.
    /// A writer that stopped for want of a bookie or of the metadata
    /// service still owns the ledger, and every entry it acknowledged is
    /// at or below its LAC: closing there loses nothing (BookKeeper's
    /// handle closes itself on an unrecoverable add error), where leaving
    /// it open would wait for a recovery.
    pub fn may_close(&self) -> Result<(), FailReason> {
        match &self.done {
            None | Some(FailReason::NotEnoughBookies | FailReason::MetadataUnavailable) => Ok(()),
            Some(r) => Err(r.clone()),
        }
    }

    /// A close was started ([`Writer::start_closing`]) and not yet settled.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    fn finish(&mut self, reason: FailReason) -> Vec<Command> {
        if self.done.is_some() {
            return Vec::new();
        }
        self.done = Some(reason.clone());
        let ids: Vec<u64> = std::mem::take(&mut self.pending).into_keys().collect();
        vec![Command::Fail { reason, entry_ids: ids }]
    }

    /// The ensembles, by first entry id.
    pub fn ensembles(&self) -> BTreeMap<u64, Vec<Member>> {
        self.ensembles.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<Member> {
        (1..=n).map(|i| Member { bookie_id: format!("b{i}"), instance_id: format!("i{i}") }).collect()
    }

    fn stored(m: &Member) -> Answer {
        Answer::Stored { instance_id: m.instance_id.clone() }
    }

    fn writer(e: usize, w: usize, a: usize) -> Writer {
        let opts = WriterOptions { max_pending: 100, add_timeout: Duration::from_secs(1), ..WriterOptions::default() };
        Writer::new(9, Quorums::new(e, w, a).unwrap(), members(e), opts)
    }

    fn acked(cmds: &[Command]) -> Vec<u64> {
        cmds.iter()
            .flat_map(|c| match c {
                Command::Acknowledge { entry_ids, .. } => entry_ids.clone(),
                _ => vec![],
            })
            .collect()
    }

    /// Issue #19 items 5 and 6: the slowest member meets the ledger first
    /// after our close; its guard finds it closed and refuses the copy as
    /// fenced. That fence is no failure of the close, and the copy is not
    /// dropped: it goes again as a recovery add once the close succeeded.
    #[test]
    fn a_fence_met_by_our_own_close_fails_nothing_and_the_copy_goes_again() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        for i in 0..3u64 {
            w.add(Bytes::from(format!("e{i}")), t).unwrap();
        }
        let mut acks = Vec::new();
        for i in 0..3u64 {
            acks.extend(acked(&w.answer(i, 0, &ms[0], stored(&ms[0]))));
            acks.extend(acked(&w.answer(i, 1, &ms[1], stored(&ms[1]))));
        }
        assert_eq!(acks, vec![0, 1, 2]);
        assert_eq!(w.copies_in_flight(), 3, "the third copies are still on their way");
        w.start_closing();
        // b3 refuses entry 0 as fenced while the close's CAS is in flight.
        assert_eq!(w.answer(0, 2, &ms[2], Answer::Fenced), vec![], "no failure, no ensemble change");
        assert_eq!(w.fenced(), vec![], "an explicit-LAC fence answer decides nothing either");
        assert!(w.done().is_none());
        let out = w.closed();
        assert_eq!(out.iter().filter(|c| matches!(c, Command::Fail { reason: FailReason::Closed, .. })).count(), 1);
        let resent: Vec<(u64, usize, bool)> = out
            .iter()
            .filter_map(|c| match c {
                Command::Send { entry, position, recovery, .. } => Some((entry.entry_id, *position, *recovery)),
                _ => None,
            })
            .collect();
        assert_eq!(resent, vec![(0, 2, true)], "the refused copy goes again as a recovery add");
        // Entry 1's copy meets the guard after the close: sent again at once.
        let out = w.answer(1, 2, &ms[2], Answer::Fenced);
        assert!(matches!(&out[..], [Command::Send { entry, recovery: true, .. }] if entry.entry_id == 1), "{out:?}");
        assert!(w.answer(0, 2, &ms[2], stored(&ms[2])).is_empty());
        assert!(w.answer(1, 2, &ms[2], stored(&ms[2])).is_empty());
        // Entry 2's copy fails outright: lost, and said so.
        let out = w.answer(2, 2, &ms[2], Answer::Failed);
        assert_eq!(out, vec![Command::CopyLost { entry_id: 2, position: 2, member: ms[2].clone() }]);
        assert_eq!((w.copies_in_flight(), w.lost_copies()), (0, 1));
    }

    /// A fence from someone else's recovery still ends the writer, and a
    /// copy of an acknowledged entry that fails while the ledger is open is
    /// counted lost (and its member replaced).
    #[test]
    fn a_fence_outside_a_close_ends_the_writer_and_a_failed_copy_is_lost() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        w.add(Bytes::from_static(b"a"), t).unwrap();
        w.add(Bytes::from_static(b"b"), t).unwrap();
        for i in 0..2u64 {
            w.answer(i, 0, &ms[0], stored(&ms[0]));
            w.answer(i, 1, &ms[1], stored(&ms[1]));
        }
        let out = w.answer(0, 2, &ms[2], Answer::Failed);
        assert!(out.contains(&Command::CopyLost { entry_id: 0, position: 2, member: ms[2].clone() }), "{out:?}");
        assert!(out.iter().any(|c| matches!(c, Command::ChangeEnsemble { .. })), "{out:?}");
        let out = w.answer(1, 2, &ms[2], Answer::Fenced);
        assert!(out.iter().any(|c| matches!(c, Command::Fail { reason: FailReason::Fenced, .. })), "{out:?}");
        assert_eq!(w.done(), Some(&FailReason::Fenced));
    }

    fn sent_to(cmds: &[Command]) -> Vec<(u64, usize)> {
        cmds.iter()
            .filter_map(|c| match c {
                Command::Send { entry, position, .. } => Some((entry.entry_id, *position)),
                _ => None,
            })
            .collect()
    }

    /// Issue #19 item 7: a bookie that could not ask the metadata service
    /// about a new ledger (a leader election) is up; it is asked again, and
    /// never replaced for it, however long the election takes.
    #[test]
    fn a_bookie_that_cannot_reach_the_metadata_service_is_asked_again_not_replaced() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        w.add(Bytes::from_static(b"e0"), t).unwrap();
        for (i, m) in ms.iter().enumerate() {
            assert_eq!(w.answer(0, i, m, Answer::Unavailable), vec![]);
        }
        // Long past the add timeout (1 s): every member answered, so none is failed.
        let mut at = t;
        for round in 1..=10 {
            at = t + Duration::from_millis(900 * round);
            let out = w.tick(at);
            assert!(!out.iter().any(|c| matches!(c, Command::ChangeEnsemble { .. })), "round {round}: {out:?}");
            assert_eq!(sent_to(&out), vec![(0, 0), (0, 1), (0, 2)], "round {round}: asked again");
            for (i, m) in ms.iter().enumerate() {
                w.answer(0, i, m, Answer::Unavailable);
            }
        }
        // The election ends: two store it, the third stays silent.
        assert!(sent_to(&w.tick(at + Duration::from_millis(50))).len() == 3);
        let resent_at = at + Duration::from_millis(50);
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        assert_eq!(acked(&w.answer(0, 1, &ms[1], stored(&ms[1]))), vec![0]);
        // An add pending behind it waits on the silent third member: its
        // timeout runs from the resend, and then it is a failure after all.
        w.add(Bytes::from_static(b"e1"), resent_at).unwrap();
        w.answer(1, 0, &ms[0], stored(&ms[0]));
        w.answer(1, 1, &ms[1], Answer::Unavailable);
        assert!(!w
            .tick(resent_at + Duration::from_millis(999))
            .iter()
            .any(|c| matches!(c, Command::ChangeEnsemble { .. })));
        let out = w.tick(resent_at + Duration::from_millis(1000));
        assert!(
            out.iter().any(|c| matches!(c, Command::ChangeEnsemble { failed, .. } if failed == &vec![2])),
            "the silent member, and only it, is failed: {out:?}"
        );
        assert_eq!(w.lost_copies(), 0);
    }

    /// The copy of an acknowledged entry that met an election is sent again
    /// while the writer runs, and as a recovery add after its own close.
    #[test]
    fn a_copy_that_met_an_election_goes_again_and_is_not_lost() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        w.add(Bytes::from_static(b"e0"), t).unwrap();
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        assert_eq!(acked(&w.answer(0, 1, &ms[1], stored(&ms[1]))), vec![0]);
        assert!(w.answer(0, 2, &ms[2], Answer::Unavailable).is_empty());
        assert_eq!(w.copies_in_flight(), 1);
        assert_eq!(sent_to(&w.tick(t + Duration::from_millis(50))), vec![(0, 2)]);
        // Again unavailable, now while our close is under way.
        w.start_closing();
        assert!(w.answer(0, 2, &ms[2], Answer::Unavailable).is_empty());
        assert!(sent_to(&w.tick(t + Duration::from_millis(100))).is_empty(), "the close decides");
        let out = w.closed();
        assert!(
            matches!(&out[..], [Command::Fail { .. }, Command::Send { entry, position: 2, recovery: true, .. }] if entry.entry_id == 0),
            "{out:?}"
        );
        assert!(w.answer(0, 2, &ms[2], stored(&ms[2])).is_empty());
        assert_eq!((w.copies_in_flight(), w.lost_copies()), (0, 0));
    }

    #[test]
    fn write_sets_stripe_over_the_ensemble() {
        let q = Quorums::new(5, 3, 2).unwrap();
        assert_eq!(q.write_set(0), vec![0, 1, 2]);
        assert_eq!(q.write_set(3), vec![3, 4, 0]);
        assert_eq!(q.write_set(7), vec![2, 3, 4]);
        assert!(Quorums::new(3, 2, 3).is_none());
    }

    #[test]
    fn an_add_is_acknowledged_at_qa_and_only_after_every_lower_entry() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        let (e0, s0) = w.add(Bytes::from_static(b"a"), t).unwrap();
        let (e1, _) = w.add(Bytes::from_static(b"b"), t).unwrap();
        assert_eq!((e0, e1), (0, 1));
        assert_eq!(s0.len(), 3);
        // Entry 1 reaches Qa first: held back until entry 0 does.
        assert!(acked(&w.answer(1, 0, &ms[0], stored(&ms[0]))).is_empty());
        assert!(acked(&w.answer(1, 1, &ms[1], stored(&ms[1]))).is_empty());
        assert!(acked(&w.answer(0, 2, &ms[2], stored(&ms[2]))).is_empty());
        let out = w.answer(0, 0, &ms[0], stored(&ms[0]));
        assert_eq!(out, vec![Command::Acknowledge { entry_ids: vec![0, 1], lac: 1 }]);
        // The next entry carries the LAC.
        let (_, s2) = w.add(Bytes::from_static(b"c"), t).unwrap();
        let Command::Send { entry, .. } = &s2[0] else { panic!() };
        assert_eq!(entry.last_add_confirmed, 1);
        assert!(entry.digest_ok());
    }

    #[test]
    fn a_replaced_process_at_the_same_address_is_a_failure_not_a_success() {
        let t = Instant::now();
        let mut w = writer(2, 2, 2);
        let ms = members(2);
        w.add(Bytes::from_static(b"x"), t).unwrap();
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        // Seed 003: bookie 2 was wiped and restarted at its address.
        let out = w.answer(0, 1, &ms[1], Answer::Stored { instance_id: "fresh".into() });
        assert_eq!(out, vec![Command::ChangeEnsemble { failed: vec![1], first_entry_id: 0 }]);
        assert_eq!(w.lac(), -1, "nothing acknowledged on the impostor's word");
    }

    #[test]
    fn an_ensemble_change_resends_pending_entries_to_the_replacement_only() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        for _ in 0..2 {
            w.add(Bytes::from_static(b"x"), t).unwrap();
        }
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        let out = w.answer(0, 2, &ms[2], Answer::Failed);
        assert_eq!(out, vec![Command::ChangeEnsemble { failed: vec![2], first_entry_id: 0 }]);
        // Adds during the change wait for the new ensemble.
        let (_, none) = w.add(Bytes::from_static(b"y"), t).unwrap();
        assert!(none.is_empty());
        let mut new = ms.clone();
        new[2] = Member { bookie_id: "b4".into(), instance_id: "i4".into() };
        let resent = w.ensemble_changed(0, new.clone(), t);
        // Entry 0: only positions 1 and 2 lack it (0 confirmed); entries 1 and 2: all three.
        let count = |id: u64| {
            resent.iter().filter(|c| matches!(c, Command::Send { entry, .. } if entry.entry_id == id)).count()
        };
        assert_eq!((count(0), count(1), count(2)), (2, 3, 3));
        assert!(resent.iter().all(|c| !matches!(c, Command::Send { position: 2, member, .. } if *member != new[2])));
        // The old member's late answer counts for nothing now.
        assert!(w.answer(1, 2, &ms[2], stored(&ms[2])).is_empty());
        let out = w.answer(0, 2, &new[2], stored(&new[2]));
        assert_eq!(acked(&out), vec![0]);
    }

    #[test]
    fn fencing_fails_every_pending_and_later_add() {
        let t = Instant::now();
        let mut w = writer(3, 2, 2);
        let ms = members(3);
        w.add(Bytes::from_static(b"x"), t).unwrap();
        w.add(Bytes::from_static(b"y"), t).unwrap();
        let out = w.answer(1, 1, &ms[1], Answer::Fenced);
        assert_eq!(out, vec![Command::Fail { reason: FailReason::Fenced, entry_ids: vec![0, 1] }]);
        assert_eq!(w.add(Bytes::new(), t), Err(AddError::Done(FailReason::Fenced)));
        assert!(w.answer(0, 0, &ms[0], stored(&ms[0])).is_empty(), "nothing is acknowledged after a fence");
    }

    #[test]
    fn timeouts_count_as_failures_and_pending_adds_are_bounded() {
        let t = Instant::now();
        let opts =
            WriterOptions { max_pending: 2, add_timeout: Duration::from_millis(100), ..WriterOptions::default() };
        let mut w = Writer::new(1, Quorums::new(3, 3, 2).unwrap(), members(3), opts);
        let ms = members(3);
        w.add(Bytes::new(), t).unwrap();
        w.add(Bytes::new(), t).unwrap();
        assert_eq!(w.add(Bytes::new(), t), Err(AddError::Backpressure(2)));
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        w.answer(0, 1, &ms[1], stored(&ms[1]));
        w.answer(1, 0, &ms[0], stored(&ms[0]));
        w.answer(1, 1, &ms[1], stored(&ms[1]));
        assert!(w.tick(t + Duration::from_millis(50)).is_empty());
        // Both acknowledged (Qa = 2); nothing pending, so no timeouts either.
        assert_eq!(w.lac(), 1);
        w.add(Bytes::new(), t).unwrap();
        let out = w.tick(t + Duration::from_millis(150));
        assert_eq!(out, vec![Command::ChangeEnsemble { failed: vec![0, 1, 2], first_entry_id: 2 }]);
    }

    #[test]
    fn an_idle_writer_publishes_its_lac_once() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        assert!(!w.wants_tick(), "a new writer has nothing for time to do");
        w.add(Bytes::from_static(b"x"), t).unwrap();
        assert!(w.wants_tick(), "a pending add has a timeout");
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        w.answer(0, 1, &ms[1], stored(&ms[1]));
        assert_eq!(w.lac(), 0);
        assert!(w.wants_tick(), "the LAC is not published yet");
        assert!(w.tick(t + Duration::from_millis(10)).is_empty(), "not idle yet");
        let out = w.tick(t + Duration::from_millis(200));
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|c| matches!(c, Command::SendLac { lac: 0, .. })));
        assert!(!w.wants_tick(), "idle: no timer until the next add");
        assert!(w.tick(t + Duration::from_millis(400)).is_empty(), "already published");
        // The next entry carries LAC 0 itself.
        let (_, s) = w.add(Bytes::from_static(b"y"), t).unwrap();
        let Command::Send { entry, .. } = &s[0] else { panic!() };
        assert_eq!((entry.last_add_confirmed, entry.ledger_length), (0, 2));
    }

    #[test]
    fn recovery_resumes_after_the_lac_with_recovery_adds_of_the_bytes_read() {
        let t = Instant::now();
        let ms = members(3);
        let q = Quorums::new(3, 3, 2).unwrap();
        let opts = WriterOptions { recovery: true, ..WriterOptions::default() };
        let mut w = Writer::resume(4, q, BTreeMap::from([(0, ms.clone())]), 6, 70, opts);
        let read = Entry::sealed_at(4, 7, 5, 80, Bytes::from_static(b"0123456789"));
        let sends = w.add_recovered(read.clone(), t).unwrap();
        assert_eq!(sends.len(), 3);
        assert!(sends.iter().all(|c| matches!(c, Command::Send { recovery: true, entry, .. } if *entry == read)));
        w.answer(7, 1, &ms[1], stored(&ms[1]));
        let out = w.answer(7, 2, &ms[2], stored(&ms[2]));
        assert_eq!(acked(&out), vec![7]);
        assert_eq!((w.lac(), w.length()), (7, 80));
        assert!(w.tick(t + Duration::from_secs(1)).is_empty(), "recovery publishes no LAC");
    }

    #[test]
    fn a_bookie_failing_an_entry_acknowledged_without_it_is_still_replaced() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        w.add(Bytes::from_static(b"x"), t).unwrap();
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        assert_eq!(acked(&w.answer(0, 1, &ms[1], stored(&ms[1]))), vec![0]);
        let out = w.answer(0, 2, &ms[2], Answer::Failed);
        assert_eq!(
            out,
            vec![
                Command::CopyLost { entry_id: 0, position: 2, member: ms[2].clone() },
                Command::ChangeEnsemble { failed: vec![2], first_entry_id: 1 }
            ]
        );
    }

    #[test]
    fn a_writer_that_found_no_replacement_still_closes_at_its_lac() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        w.add(Bytes::from_static(b"x"), t).unwrap();
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        assert_eq!(acked(&w.answer(0, 1, &ms[1], stored(&ms[1]))), vec![0]);
        w.add(Bytes::from_static(b"y"), t).unwrap();
        assert!(!w.answer(0, 2, &ms[2], Answer::Failed).is_empty(), "a change starts");
        assert!(w.changing());
        let out = w.abort(FailReason::NotEnoughBookies);
        assert_eq!(out, vec![Command::Fail { reason: FailReason::NotEnoughBookies, entry_ids: vec![1] }]);
        // The change is over (a close waits for none), and the ledger is still ours.
        assert!(!w.changing());
        assert_eq!((w.may_close(), w.pending(), w.lac()), (Ok(()), 0, 0));
        w.start_closing();
        assert!(w.is_closing());
        assert!(w.closed().is_empty());
        assert!(!w.is_closing());
        assert_eq!(w.may_close(), Err(FailReason::Closed), "closed once");
        // A fenced writer may not close.
        let mut f = writer(3, 3, 2);
        f.fenced();
        assert_eq!(f.may_close(), Err(FailReason::Fenced));
    }

    #[test]
    fn a_bookie_failing_a_copy_during_the_close_starts_no_ensemble_change() {
        let t = Instant::now();
        let mut w = writer(3, 3, 2);
        let ms = members(3);
        w.add(Bytes::from_static(b"x"), t).unwrap();
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        assert_eq!(acked(&w.answer(0, 1, &ms[1], stored(&ms[1]))), vec![0]);
        w.start_closing();
        let out = w.answer(0, 2, &ms[2], Answer::Failed);
        assert_eq!(out, vec![Command::CopyLost { entry_id: 0, position: 2, member: ms[2].clone() }]);
        assert!(!w.changing());
    }

    #[test]
    fn nothing_is_acknowledged_while_the_ensemble_changes() {
        // Seed 92 of the simulator: E=3 Qw=2 Qa=2. Position 1 fails while
        // entry 0 waits; its late copy must not acknowledge entry 0 under an
        // ensemble that no longer names it.
        let t = Instant::now();
        let mut w = writer(3, 2, 2);
        let ms = members(3);
        w.add(Bytes::from_static(b"x"), t).unwrap();
        w.add(Bytes::from_static(b"y"), t).unwrap();
        w.answer(0, 0, &ms[0], stored(&ms[0]));
        let change = w.answer(1, 1, &ms[1], Answer::Failed);
        assert_eq!(change, vec![Command::ChangeEnsemble { failed: vec![1], first_entry_id: 0 }]);
        assert!(w.answer(0, 1, &ms[1], stored(&ms[1])).is_empty(), "a failed member's copy does not count");
        assert!(w.answer(1, 2, &ms[2], stored(&ms[2])).is_empty());
        assert_eq!(w.lac(), -1);
        let mut new = ms.clone();
        new[1] = Member { bookie_id: "b9".into(), instance_id: "i9".into() };
        let out = w.ensemble_changed(0, new.clone(), t);
        assert!(acked(&out).is_empty());
        let out = w.answer(0, 1, &new[1], stored(&new[1]));
        assert_eq!(acked(&out), vec![0]);
    }
}
