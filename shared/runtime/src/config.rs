//! Layered configuration: flag > environment variable > TOML file > built-in default.
//!
//! Options are declared once, as a clap `Parser`. A TOML file named by
//! `--config` (or `QUIRE_CONFIG`) supplies defaults: each top-level key is an
//! option's long name with `_` or `-` (`listen`, `certs_dir`), and becomes that
//! option's default before the command line is parsed, so `--help` and the
//! precedence rules stay clap's own. An unknown key is an error, never ignored:
//! a typo in a config file must not silently fall back to a default.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Command, Parser};

/// Parses the process's arguments (see the module doc).
pub fn parse<T: Parser>() -> anyhow::Result<T> {
    parse_from(std::env::args_os())
}

/// Parses `args` (the first is the program name) with the TOML layer.
///
/// `--help` and `--version` print and exit the process, as clap does.
pub fn parse_from<T: Parser, I, A>(args: I) -> anyhow::Result<T>
where
    I: IntoIterator<Item = A>,
    A: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let mut cmd = T::command();
    if let Some(path) = config_path(&args) {
        cmd = apply_file(cmd, &path)?;
    }
    let matches = cmd.get_matches_from(args);
    T::from_arg_matches(&matches).map_err(|e| anyhow::anyhow!(e.to_string()))
}

fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
        if s == "--" {
            break;
        }
    }
    std::env::var_os("QUIRE_CONFIG").map(PathBuf::from)
}

fn apply_file(mut cmd: Command, path: &Path) -> anyhow::Result<Command> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read config file {}", path.display()))?;
    let table: toml::Table = text.parse().with_context(|| format!("parse config file {}", path.display()))?;
    for (key, value) in table {
        let id = key.replace('-', "_");
        let Some(arg_id) = cmd.get_arguments().find(|a| a.get_id().as_str() == id).map(|a| a.get_id().clone()) else {
            bail!("{}: unknown option {key:?} (see --help for the options)", path.display());
        };
        let values: Vec<String> = match value {
            toml::Value::Array(items) => items.iter().map(scalar).collect::<anyhow::Result<_>>()?,
            other => vec![scalar(&other)?],
        };
        cmd = cmd.mut_arg(arg_id, |a| {
            let vals: Vec<clap::builder::OsStr> =
                values.iter().map(|v| clap::builder::OsStr::from(v.clone())).collect();
            a.default_values(vals)
        });
    }
    Ok(cmd)
}

fn scalar(v: &toml::Value) -> anyhow::Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => bail!("config value {other} is not a string, number, boolean or array of them"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    struct Opts {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, env = "QUIRE_TEST_LISTEN", default_value = "127.0.0.1:1")]
        listen: String,
        #[arg(long, default_value_t = 4)]
        lanes: u32,
        #[arg(long)]
        peers: Vec<String>,
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn file_overrides_defaults_and_flags_override_file() {
        let f = file("listen = \"0.0.0.0:9\"\nlanes = 8\npeers = [\"a:1\", \"b:2\"]\n");
        let p = f.path().to_str().unwrap();
        let o: Opts = parse_from(["x", "--config", p]).unwrap();
        assert_eq!(o.listen, "0.0.0.0:9");
        assert_eq!(o.lanes, 8);
        assert_eq!(o.peers, vec!["a:1", "b:2"]);
        let o: Opts = parse_from(["x", "--config", p, "--lanes", "2"]).unwrap();
        assert_eq!(o.lanes, 2);
        let o: Opts = parse_from(["x"]).unwrap();
        assert_eq!(o.lanes, 4);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let f = file("lanez = 8\n");
        let err = parse_from::<Opts, _, _>(["x", "--config", f.path().to_str().unwrap()]).unwrap_err();
        assert!(err.to_string().contains("unknown option \"lanez\""), "{err}");
    }

    #[test]
    fn bad_toml_is_an_error() {
        let f = file("listen = \n");
        assert!(parse_from::<Opts, _, _>(["x", "--config", f.path().to_str().unwrap()]).is_err());
    }
}
