//! `make check-model`: the protocol model checker over the configurations
//! `make test` runs and larger ones; prints states explored, time, and any
//! counterexample trace.

use clap::Parser;
use quire_model::{check, check_chain, ChainBug, ChainConfig, Config};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Exhaustive model checking of quire's ledger protocol (stateright)")]
struct Args {
    /// Entries the writer adds.
    #[arg(long, default_value_t = 2)]
    entries: u64,
    /// Write quorums to check (E=3, Qa=2).
    #[arg(long, value_delimiter = ',', default_value = "2,3")]
    write_quorums: Vec<usize>,
    /// Lost messages allowed.
    #[arg(long, default_value_t = 2)]
    timeouts: u8,
    /// Recoverers racing the writer.
    #[arg(long, default_value_t = 2)]
    recoverers: usize,
    /// Recovery runs each recoverer may start.
    #[arg(long, default_value_t = 1)]
    runs: u8,
    /// Recoverer crashes allowed.
    #[arg(long, default_value_t = 1)]
    crashes: u8,
    /// Bookie replacements allowed.
    #[arg(long, default_value_t = 1)]
    replacements: u8,
    /// The writer never crashes (it may still close or idle).
    #[arg(long)]
    no_writer_crash: bool,
    /// Recovery's read window.
    #[arg(long, default_value_t = 1)]
    read_window: usize,
    /// Check the shell as it was before issue #19's fix (recovery's
    /// replacements stored at once): it must find the overlapping-recovery loss.
    #[arg(long)]
    pre_fix: bool,
    /// Bound the search to interleavings with at most this many preemptions
    /// (a switch of party while the running one could still act); without
    /// it, every interleaving.
    #[arg(long)]
    preemptions: Option<u8>,
    /// Stop at the first state breaking any invariant.
    #[arg(long)]
    first: bool,
    /// Checker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Check the log protocol (LedgerChaining) instead of the ledger's.
    #[arg(long)]
    log: bool,
    /// Log model: writer processes racing for the log.
    #[arg(long, default_value_t = 2)]
    log_writers: usize,
    /// Log model: takeovers each writer may start.
    #[arg(long, default_value_t = 1)]
    log_takeovers: u8,
    /// Log model: appends per writer.
    #[arg(long, default_value_t = 2)]
    log_appends: u8,
    /// Log model: records per ledger before a rollover.
    #[arg(long, default_value_t = 2)]
    log_rollover: u64,
    /// Log model: trims.
    #[arg(long, default_value_t = 1)]
    log_trims: u8,
    /// Log model: writer crashes.
    #[arg(long, default_value_t = 1)]
    log_crashes: u8,
    /// Log model: deletes of the log racing the writers.
    #[arg(long, default_value_t = 0)]
    log_deletes: u8,
    /// Log model: records per atomic batch (issue #47).
    #[arg(long, default_value_t = 1)]
    log_batch: u64,
    /// Log model: check with a deliberate bug (no-fence, write-ahead,
    /// sweep-unbounded, delete-unfenced, keep-cut-batch): it must be found.
    #[arg(long)]
    log_bug: Option<String>,
    /// Stop after generating this many states (repeats included: the
    /// checker's own count; 0: explore everything).
    #[arg(long, default_value_t = 0)]
    max_states: usize,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.log {
        return check_log(&a);
    }
    let mut failed = false;
    for w in &a.write_quorums {
        let mut c = Config::small(*w, 2, a.entries);
        c.timeouts = a.timeouts;
        c.recoverers = a.recoverers;
        c.runs_per_recoverer = a.runs;
        c.recoverer_crashes = a.crashes;
        c.replacements = a.replacements;
        c.read_window = a.read_window;
        c.writer_crash = !a.no_writer_crash;
        c.store_replacements_eagerly = a.pre_fix;
        c.preemptions = a.preemptions;
        c.stop_at_first_violation = a.first;
        let r = check(c, a.threads, a.max_states);
        println!("{}", r.summary());
        if !r.complete {
            println!("  (stopped at the state bound: not exhaustive)");
        }
        for (name, actions, last) in &r.violations {
            failed = true;
            println!("  counterexample for \"{name}\" ({} steps):", actions.len());
            let mut party = None;
            for (i, act) in actions.iter().enumerate() {
                if act.action.owner().is_some() && act.action.owner() != party {
                    party = act.action.owner();
                    println!("         -- {:?} --", party.expect("some"));
                }
                println!("    {:>3}. {act:?}", i + 1);
            }
            println!("  final state:\n{last}");
        }
    }
    if failed && !a.pre_fix {
        anyhow::bail!("a property was violated");
    }
    Ok(())
}

fn check_log(a: &Args) -> anyhow::Result<()> {
    let bug = match a.log_bug.as_deref() {
        None => None,
        Some("no-fence") => Some(ChainBug::NoFence),
        Some("write-ahead") => Some(ChainBug::WriteAhead),
        Some("sweep-unbounded") => Some(ChainBug::SweepUnbounded),
        Some("delete-unfenced") => Some(ChainBug::DeleteUnfenced),
        Some("keep-cut-batch") => Some(ChainBug::KeepCutBatch),
        Some(other) => {
            anyhow::bail!(
                "--log-bug {other}: no-fence, write-ahead, sweep-unbounded, delete-unfenced or keep-cut-batch"
            )
        }
    };
    let c = ChainConfig {
        writers: a.log_writers,
        takeovers: a.log_takeovers,
        appends: a.log_appends,
        rollover_entries: a.log_rollover,
        trims: a.log_trims,
        crashes: a.log_crashes,
        deletes: a.log_deletes,
        batch: a.log_batch.max(1),
        bug,
    };
    let r = check_chain(c, a.threads);
    println!("{}", r.summary());
    for (name, steps, last) in &r.violations {
        println!("  counterexample for \"{name}\" ({} steps):", steps.len());
        for (i, s) in steps.iter().enumerate() {
            println!("    {:>3}. {s:?}", i + 1);
        }
        println!("  final state:\n{last}");
    }
    if !r.violations.is_empty() && bug.is_none() {
        anyhow::bail!("a log property was violated");
    }
    if r.violations.is_empty() && bug.is_some() {
        anyhow::bail!("the deliberate bug was not found");
    }
    Ok(())
}
