//! The model checker in `make test`: the configurations small enough to
//! explore exhaustively within the suite's budget, and proof that each
//! invariant can fail.

use quire_model::{check, Config};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Explores `c` to the end: more than `floor` states, every invariant held.
fn holds_everywhere(c: Config, floor: usize) {
    let r = check(c, 2, 0);
    println!("{}", r.summary());
    assert!(r.complete, "not explored to the end: {}", r.summary());
    assert!(r.unique_states > floor, "suspiciously few states: {}", r.summary());
    assert!(r.violations.is_empty(), "{}\n{:#?}", r.summary(), r.violations);
}

/// The writer racing one recoverer (which may fence it at any point), one
/// entry, E=3 Qa=2 with Qw 2 and 3, the writer free to crash at any step:
/// every reachable state holds every invariant.
#[test]
fn the_writer_racing_a_recovery_holds_every_invariant_in_every_state() {
    for write in [2, 3] {
        let mut c = Config::small(write, 2, 1);
        c.recoverers = 1;
        c.runs_per_recoverer = 1;
        c.timeouts = 0;
        c.replacements = 0;
        c.recoverer_crashes = 0;
        c.read_window = 1;
        holds_everywhere(c, 10_000);
    }
}

/// The same with one message lost anywhere (a timeout: the writer changes
/// its ensemble, recovery meets a silent bookie).
#[test]
fn a_lost_message_anywhere_breaks_no_invariant() {
    let mut c = Config::small(2, 2, 1);
    c.recoverers = 1;
    c.runs_per_recoverer = 1;
    c.timeouts = 1;
    c.replacements = 0;
    c.recoverer_crashes = 0;
    c.read_window = 1;
    holds_everywhere(c, 1_000_000);
}

/// The scope, preemption-bounded: the writer (which may crash at
/// any step) and two recoverers racing it and each other, one of them free
/// to crash at any step, one message lost anywhere, E=3 Qw=2 Qa=2 and a
/// spare bookie. Every interleaving in which parties switch only when the
/// one running has nothing left to do (or is gone) holds every invariant.
#[test]
fn two_recoverers_a_crash_and_a_lost_message_hold_every_invariant_without_preemption() {
    holds_everywhere(overlapping_recoveries(false), 1_000_000);
}

/// The same configuration on the shell as it was before issue #19's fix
/// (recovery stored each write-back replacement at once): the checker
/// finds item 1, a second recovery closing below an entry the first one
/// had found, because the member the first one put in the ensemble never
/// received it and its NoSuchEntry was taken as evidence of absence.
#[test]
fn the_shell_before_the_fix_truncates_an_acknowledged_entry_and_the_checker_finds_it() {
    let r = check(overlapping_recoveries(true), 2, 0);
    println!("{}", r.summary());
    let (_, moves, last) = r
        .violations
        .iter()
        .find(|v| v.0 == "no out-of-order or premature decisions")
        .unwrap_or_else(|| panic!("the pre-fix shell was not caught: {}", r.summary()));
    assert!(last.contains("would close at -1 below acknowledged entry 0"), "{last}");
    let starts = moves.iter().filter(|m| matches!(m.action, quire_model::Action::RecStart(_))).count();
    let replaced = moves.iter().any(|m| matches!(m.action, quire_model::Action::RecReplace(..)));
    assert!(starts == 2 && replaced, "not the overlapping-recovery shape: {moves:?}");
}

fn overlapping_recoveries(pre_fix: bool) -> Config {
    let mut c = Config::small(2, 2, 1);
    c.recoverers = 2;
    c.runs_per_recoverer = 1;
    c.timeouts = 1;
    c.replacements = 0;
    c.recoverer_crashes = 1;
    c.read_window = 1;
    c.preemptions = Some(0);
    c.store_replacements_eagerly = pre_fix;
    c.stop_at_first_violation = pre_fix;
    c
}

/// A run cut short by its state bound is never reported as exhaustive
/// (stateright's bound counts generated states; the report once compared
/// it with the distinct ones and called a cut run complete).
#[test]
fn a_run_stopped_by_its_state_bound_is_not_reported_complete() {
    let r = check(Config::small(2, 2, 1), 1, 3_000);
    assert!(r.states >= 3_000, "{}", r.summary());
    assert!(r.unique_states < 3_000, "the case this test is for: {}", r.summary());
    assert!(!r.complete, "{}", r.summary());
}

/// Each invariant can fail: a state that breaks it is judged broken.
#[test]
fn every_invariant_can_fail() {
    use quire_model::model::LedgerModel;
    use stateright::Model;
    let model = LedgerModel::new(Config::small(2, 2, 1));
    let init = model.init_states().remove(0);
    let props = model.properties();
    let holds = |s: &quire_model::state::State, name: &str| {
        let p = props.iter().find(|p| p.name == name).expect("a property of that name");
        (p.condition)(&model, s)
    };
    for p in &props {
        assert!((p.condition)(&model, &init), "{} fails in the initial state", p.name);
    }
    // An acknowledged entry on no bookie.
    let mut s = init.clone();
    s.acked.get_mut().insert(0, bytes::Bytes::from_static(b"a"));
    s.submitted.get_mut().insert(0, bytes::Bytes::from_static(b"a"));
    assert!(!holds(&s, "every acknowledged entry is readable"));
    // ... and past the close.
    s.meta.get_mut().state = quire_client::meta::LedgerState::Closed;
    assert!(!holds(&s, "no divergence between the client and the metadata"));
    // A closed entry that never reached Qa copies.
    s.meta.get_mut().last_entry_id = 0;
    assert!(!holds(&s, "every committed entry reached Qa"));
    // A rule broken in a transition.
    let mut b = init.clone();
    b.broken = Some("test".into());
    assert!(!holds(&b, "no out-of-order or premature decisions"));
    // A copy with other bytes than the writer's.
    let mut d = init;
    d.submitted.get_mut().insert(0, bytes::Bytes::from_static(b"a"));
    let entry = quire_proto::v1::Entry::sealed(quire_model::model::LEDGER, 0, -1, bytes::Bytes::from_static(b"z"));
    let add = quire_client::sim::bookie::BookieReq::Add { entry, expected_instance: String::new(), recovery: true };
    d.bookies[0].get_mut().handle(add, |_| Some(true));
    assert!(!holds(&d, "one value per entry"));
}
