//! quire-crashfs: a crashfs mount as a process of its own, driven over a
//! Unix socket, for tests whose services run as processes (the fault suite).
//!
//! ```text
//! quire-crashfs mount --state DIR --mount MNT --control SOCK   # prints "ready SOCK", serves until crash or unmount
//! quire-crashfs ctl --control SOCK freeze                      # the power goes: every call fails (EIO)
//! quire-crashfs ctl --control SOCK crash SEED drop|torn|prefix all|prefix
//! quire-crashfs ctl --control SOCK fail-fsync files|dirs|any PATH_CONTAINS SKIP FAIL
//! quire-crashfs ctl --control SOCK stats
//! quire-crashfs ctl --control SOCK unmount                     # clean: nothing is lost
//! ```
//! A crash (or unmount) ends the mount process; to go on after a power cut,
//! mount the same state directory again. One command per connection, one
//! line each way: `ok ...` or `error ...`.

// The workspace's allocator, as every binary (services/quire/tests/workspace.rs).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use quire_crashfs::{Crash, DataLoss, FsyncFault, Mount, NameLoss, SyncTarget};

#[derive(Parser)]
#[command(name = "quire-crashfs", about = "A FUSE filesystem for tests that forgets what was never synced")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mounts MNT over STATE/data and serves commands on SOCK until a crash or an unmount.
    Mount {
        #[arg(long)]
        state: PathBuf,
        #[arg(long)]
        mount: PathBuf,
        #[arg(long)]
        control: PathBuf,
    },
    /// Sends one command to a running mount and prints its answer.
    Ctl {
        #[arg(long)]
        control: PathBuf,
        #[arg(required = true, trailing_var_arg = true)]
        words: Vec<String>,
    },
}

fn main() -> anyhow::Result<()> {
    match Args::parse().cmd {
        Cmd::Mount { state, mount, control } => serve(&state, &mount, &control),
        Cmd::Ctl { control, words } => {
            let mut s = UnixStream::connect(&control).with_context(|| format!("connect {}", control.display()))?;
            writeln!(s, "{}", words.join(" "))?;
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).context("read the answer")?;
            print!("{line}");
            if !line.starts_with("ok") {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// What a command asks for.
enum Next {
    Reply(String),
    /// Reply, then end the mount (`crash`, `unmount`).
    End(Box<dyn FnOnce(Mount) -> anyhow::Result<String>>),
}

fn parse(mount: &Mount, line: &str) -> anyhow::Result<Next> {
    let w: Vec<&str> = line.split_whitespace().collect();
    Ok(match w.as_slice() {
        ["freeze"] => {
            mount.freeze();
            Next::Reply("ok".into())
        }
        ["stats"] => {
            let s = mount.stats();
            Next::Reply(format!(
                "ok writes={} syncs={} dir_syncs={} failed_syncs={} pending_writes={} pending_names={}",
                s.writes, s.syncs, s.dir_syncs, s.failed_syncs, s.pending_writes, s.pending_names
            ))
        }
        ["fail-fsync", target, path, skip, fail] => {
            let target = match *target {
                "files" => SyncTarget::Files,
                "dirs" => SyncTarget::Dirs,
                "any" => SyncTarget::Any,
                t => bail!("unknown sync target {t:?} (files, dirs, any)"),
            };
            mount.fail_fsync(FsyncFault {
                path_contains: path.to_string(),
                target,
                skip: skip.parse().context("SKIP")?,
                fail: fail.parse().context("FAIL")?,
                cut: false,
            });
            Next::Reply("ok".into())
        }
        ["crash", seed, data, names] => {
            let data = match *data {
                "drop" => DataLoss::Drop,
                "torn" => DataLoss::Torn,
                "prefix" => DataLoss::Prefix,
                d => bail!("unknown data loss {d:?} (drop, torn, prefix)"),
            };
            let names = match *names {
                "all" => NameLoss::All,
                "prefix" => NameLoss::Prefix,
                n => bail!("unknown name loss {n:?} (all, prefix)"),
            };
            let crash = Crash { seed: seed.parse().context("SEED")?, data, names };
            Next::End(Box::new(move |m: Mount| {
                let r = m.crash(crash)?;
                Ok(format!(
                    "ok files={} writes_undone={} writes_kept={} lost_ranges={} names_undone={} names_kept={}",
                    r.files, r.writes_undone, r.writes_kept, r.lost_ranges, r.names_undone, r.names_kept
                ))
            }))
        }
        ["unmount"] => Next::End(Box::new(|m: Mount| {
            m.unmount()?;
            Ok("ok".into())
        })),
        _ => bail!("unknown command {line:?}"),
    })
}

fn serve(state: &std::path::Path, mnt: &std::path::Path, control: &std::path::Path) -> anyhow::Result<()> {
    let mount = Mount::new(state, mnt).with_context(|| format!("mount {}", mnt.display()))?;
    let _ = std::fs::remove_file(control);
    // Bound after the mount: a caller that can connect finds it mounted.
    let listener = UnixListener::bind(control).with_context(|| format!("bind {}", control.display()))?;
    // One line on stdout once commands are taken: what a caller waits for.
    println!("ready {}", control.display());
    std::io::stdout().flush()?;
    let mut mount = Some(mount);
    for conn in listener.incoming() {
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) => {
                eprintln!("quire-crashfs: accept: {e}");
                continue;
            }
        };
        let mut line = String::new();
        if BufReader::new(&conn).read_line(&mut line).is_err() {
            continue;
        }
        let m = mount.as_ref().expect("served only while mounted");
        let answer = match parse(m, line.trim()) {
            Ok(Next::Reply(r)) => r,
            Ok(Next::End(f)) => {
                let answer = f(mount.take().expect("mounted")).unwrap_or_else(|e| format!("error {e:#}"));
                let _ = writeln!(conn, "{answer}");
                let _ = std::fs::remove_file(control);
                return Ok(());
            }
            Err(e) => format!("error {e:#}"),
        };
        let _ = writeln!(conn, "{answer}");
    }
    Ok(())
}
