//! README: "Every service takes its options as flags, environment variables
//! (`QUIRE_*`) or a TOML file". Each service's `--help` is read for its
//! options; every one must name its variable, and every numeric one must
//! be read from it: an unparsable value in the variable is refused, naming
//! the option (clap checks every argument before a service starts anything).

use std::process::Command;

use quire_testkit::bin_path;

const SERVICES: &[&str] =
    &["quire-bookie", "quire-metadata", "quire-auditor", "quire-replication-worker", "quire-gateway"];

/// Options that deliberately have no variable: `--format` starts a new
/// bookie instance on its disks, a one-off act an operator types, never a
/// standing setting a deployment could leave in place across restarts.
const FLAG_ONLY: &[&str] = &["--help", "--version", "--format"];

/// One option of a `--help`: its flag, its variable and its default.
#[derive(Debug)]
struct Opt {
    flag: String,
    env: Option<String>,
    default: Option<String>,
}

/// The options of clap's long help: a block per option, starting with
/// `      --flag` and holding `[env: X=]` and `[default: Y]` lines.
fn options(help: &str) -> Vec<Opt> {
    let mut out: Vec<Opt> = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--") {
            let name = rest.split([' ', '=', '<', ',']).next().unwrap_or("");
            out.push(Opt { flag: format!("--{name}"), env: None, default: None });
        } else if t.starts_with("-h, --help") || t.starts_with("-V, --version") {
            out.push(Opt {
                flag: if t.contains("help") { "--help" } else { "--version" }.into(),
                env: None,
                default: None,
            });
        } else if let Some(o) = out.last_mut() {
            if let Some(v) = t.strip_prefix("[env: ") {
                o.env = v.split('=').next().map(str::to_string);
            } else if let Some(v) = t.strip_prefix("[default: ") {
                o.default = v.strip_suffix(']').map(str::to_string);
            }
        }
    }
    out
}

fn help_of(service: &str) -> String {
    let out = Command::new(bin_path(service)).arg("--help").env_clear().output().unwrap();
    assert!(out.status.success(), "{service} --help: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_option_of_every_service_has_its_quire_variable() {
    let mut missing = Vec::new();
    for service in SERVICES {
        let opts = options(&help_of(service));
        assert!(opts.len() > 10, "{service}: too few options parsed, the help format changed: {opts:?}");
        for o in opts.iter().filter(|o| !FLAG_ONLY.contains(&o.flag.as_str())) {
            // README: `--a-b` is QUIRE_A_B.
            let want = format!("QUIRE_{}", o.flag.trim_start_matches("--").to_uppercase().replace('-', "_"));
            if o.env.as_deref() != Some(want.as_str()) {
                missing.push(format!("{service} {}: {:?}, README says {want}", o.flag, o.env));
            }
        }
    }
    assert!(missing.is_empty(), "options without their QUIRE_* variable:\n{}", missing.join("\n"));
}

/// Options whose default looks numeric but which take any string.
const NUMBER_LIKE_NAMES: &[&str] = &["--id"];

#[test]
fn a_numeric_option_is_read_from_its_variable() {
    let mut checked = 0;
    let mut unread = Vec::new();
    for service in SERVICES {
        for o in options(&help_of(service)) {
            let (Some(env), Some(default)) = (&o.env, &o.default) else { continue };
            if default.parse::<f64>().is_err() || NUMBER_LIKE_NAMES.contains(&o.flag.as_str()) {
                continue;
            }
            let out = Command::new(bin_path(service)).env_clear().env(env, "not-a-number").output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            // clap's usage error: exit 2, naming the option the value was for.
            if out.status.code() != Some(2) || !err.contains(&o.flag) {
                unread.push(format!("{service} {} ({env}): exit {:?}: {err}", o.flag, out.status.code()));
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} numeric options found");
    assert!(unread.is_empty(), "variables not read:\n{}", unread.join("\n"));
}

#[test]
fn the_help_parser_sees_a_missing_variable() {
    let help = "Options:\n      --lease-ms <LEASE_MS>\n          Lease\n          \n          [default: 10000]\n\n      --listen <LISTEN>\n          [env: QUIRE_LISTEN=]\n  -h, --help\n          Print help\n";
    let o = options(help);
    assert_eq!(o.len(), 3, "{o:?}");
    assert_eq!((o[0].flag.as_str(), o[0].env.as_deref(), o[0].default.as_deref()), ("--lease-ms", None, Some("10000")));
    assert_eq!((o[1].flag.as_str(), o[1].env.as_deref()), ("--listen", Some("QUIRE_LISTEN")));
    assert_eq!(o[2].flag, "--help");
}
