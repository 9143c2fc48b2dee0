//! `quire`: the operator's command line.
//!
//! Certificate tooling (`quire certs init|issue`), probes of any quire server
//! over QUIC with mTLS (`quire ping`, `quire server-info`), the bookie registry
//! (`quire bookies`, `quire bookie show|decommission|recommission`), the metadata cluster (`quire metadata`) and ledgers
//! through the client library (`quire ledger write|read|info|recover|delete|list`),
//! checks (`quire selftest`, `quire bookie-sanity`, `quire under-replicated`) and
//! a whole cluster on one machine (`quire standalone`).

#[global_allocator]
static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;

mod admin;
mod bench;
mod bench_catchup;
mod bench_log;
mod bookie;
mod bookies;
mod certs;
mod ledger;
mod log;
mod metadata;
mod probe;
mod standalone;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The quire operator CLI.
#[derive(Debug, Parser)]
#[command(name = "quire", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    #[command(flatten)]
    packets: quire_runtime::PacketArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create and issue cluster certificates.
    #[command(subcommand)]
    Certs(certs::CertsCmd),
    /// Round-trip a Ping to a quire server and print the latency.
    Ping(probe::PingArgs),
    /// Ask a quire server who it is (role, id, instance id, version, uptime).
    ServerInfo(probe::InfoArgs),
    /// List the bookies registered with the metadata service.
    Bookies(bookies::BookiesArgs),
    /// One bookie: show, decommission (drain then retire), recommission.
    Bookie(bookie::BookieArgs),
    /// The metadata cluster: status of each replica, voting membership.
    Metadata(metadata::MetadataArgs),
    /// Ledgers: write, read, info, recover, delete, list.
    Ledger(ledger::LedgerArgs),
    /// Logs over chains of ledgers: create, append, read, tail, trim, info, list, delete.
    Log(log::LogArgs),
    /// A whole cluster on this machine (real processes on loopback, mTLS).
    Standalone(standalone::StandaloneArgs),
    /// Ledgers the auditor found below their write quorum.
    UnderReplicated(admin::UnderReplicatedArgs),
    /// Write, read back and delete a ledger: is the cluster working?
    Selftest(admin::SelfTestArgs),
    /// A ledger on each bookie alone, written, read back and deleted.
    BookieSanity(admin::BookieSanityArgs),
    /// Benchmark through the client library: writes (ledgers, quorums, entry
    /// size, closed loop or a target rate) or catch-up reads; percentiles,
    /// JSON or CSV.
    Bench(bench::BenchArgs),
}

/// Errors are one line on stderr (`quire: error: what: why: ...`, the
/// context chain joined), never a `Debug` dump with a backtrace, whatever
/// RUST_BACKTRACE says; the exit code is 1.
fn main() -> ExitCode {
    // Output into a closed pipe (`quire ledger list | head`) ends the
    // process quietly, as it does for other Unix tools: Rust ignores
    // SIGPIPE, and println! then panics on EPIPE.
    // SAFETY: restoring a signal's default disposition before any thread
    // starts; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quire: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").split_whitespace().collect::<Vec<_>>().join(" ")
}

fn run(cli: Cli) -> anyhow::Result<()> {
    cli.packets.install()?;
    match cli.cmd {
        Cmd::Certs(c) => certs::run(c),
        Cmd::Ping(a) => probe::ping(a),
        Cmd::ServerInfo(a) => probe::info(a),
        Cmd::Bookies(a) => bookies::list(a),
        Cmd::Bookie(a) => bookie::run(a),
        Cmd::Metadata(a) => metadata::run(a),
        Cmd::Ledger(a) => ledger::run(a),
        Cmd::Log(a) => log::run(a),
        Cmd::Standalone(a) => standalone::run(a),
        Cmd::UnderReplicated(a) => admin::under_replicated(a),
        Cmd::Selftest(a) => admin::selftest(a),
        Cmd::BookieSanity(a) => admin::bookie_sanity(a),
        Cmd::Bench(a) => bench::run(a),
    }
}
