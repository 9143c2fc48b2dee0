//! The cookie: which bookie instance owns a set of data directories.
//!
//! On first start a bookie writes the same cookie (bookie id, a fresh instance
//! id, its directories) into each of its directories. On every later start all
//! of them must hold that cookie. A wiped or swapped disk (no cookie, or
//! another one) stops the bookie from starting under the old identity
//! (BookKeeper #544): a disk that lost its data must not answer as if it had
//! it. Starting such a bookie afresh is an explicit operator act (`--format`),
//! and it comes up with a new instance id, which clients and the metadata
//! service see as a different bookie.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::StorageError;

/// The cookie's file name in each data directory.
pub const COOKIE_FILE: &str = "COOKIE";

/// The identity stored in every data directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cookie {
    /// The bookie id (its certificate id).
    pub bookie_id: String,
    /// Random per formatting of the directories.
    pub instance_id: String,
    /// The journal directory.
    pub journal_dir: PathBuf,
    /// The ledger directory.
    pub ledger_dir: PathBuf,
}

fn read(dir: &Path) -> Result<Option<Cookie>, StorageError> {
    let path = dir.join(COOKIE_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StorageError::Cookie(format!("{}: unreadable cookie: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(&path, e)),
    }
}

fn write(dir: &Path, cookie: &Cookie) -> Result<(), StorageError> {
    let path = dir.join(COOKIE_FILE);
    let tmp = dir.join("COOKIE.tmp");
    let bytes = serde_json::to_vec_pretty(cookie).expect("cookie serialises");
    std::fs::write(&tmp, bytes).map_err(|e| StorageError::io(&tmp, e))?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| StorageError::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| StorageError::io(&path, e))?;
    crate::journal::segment::sync_dir(dir).map_err(|e| StorageError::io(dir, e))
}

fn is_empty_dir(dir: &Path) -> Result<bool, StorageError> {
    match std::fs::read_dir(dir) {
        Ok(mut it) => Ok(it.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(StorageError::io(dir, e)),
    }
}

/// Checks (or, for brand-new empty directories, creates) the cookie.
///
/// - every directory empty: format them with a new instance id (`new_instance_id`);
/// - every directory holds the same cookie for `bookie_id`: that cookie;
/// - anything else (one directory wiped, swapped, another bookie's): an error
///   naming the problem, unless `format` is set, which wipes nothing but
///   writes a fresh cookie with a new instance id into every directory.
pub fn check_or_create(
    bookie_id: &str,
    journal_dir: &Path,
    ledger_dir: &Path,
    format: bool,
    new_instance_id: impl FnOnce() -> String,
) -> Result<Cookie, StorageError> {
    let dirs = [journal_dir, ledger_dir];
    let fresh = || Cookie {
        bookie_id: bookie_id.to_string(),
        instance_id: new_instance_id(),
        journal_dir: journal_dir.to_path_buf(),
        ledger_dir: ledger_dir.to_path_buf(),
    };
    let found: Vec<Option<Cookie>> = dirs.iter().map(|d| read(d)).collect::<Result<_, _>>()?;
    let all_empty = dirs.iter().map(|d| is_empty_dir(d)).collect::<Result<Vec<_>, _>>()?.into_iter().all(|e| e);
    if format || all_empty {
        let cookie = fresh();
        for d in dirs {
            quire_durable::create_dir_all_durable(d).map_err(|e| StorageError::io(d, e))?;
            write(d, &cookie)?;
        }
        return Ok(cookie);
    }
    let first = found.iter().flatten().next().cloned();
    let Some(cookie) = first else {
        return Err(StorageError::Cookie(format!(
            "{} and {} hold data but no cookie: not a quire bookie's directories (start with --format to make them a new bookie)",
            journal_dir.display(),
            ledger_dir.display()
        )));
    };
    for (d, c) in dirs.iter().zip(&found) {
        match c {
            None => {
                return Err(StorageError::Cookie(format!(
                    "{} has no cookie while its sibling directories belong to instance {}: was this disk wiped or replaced? \
                     The bookie will not answer for data it may have lost; re-replicate and start with --format",
                    d.display(),
                    cookie.instance_id
                )))
            }
            Some(c) if c != &cookie => {
                return Err(StorageError::Cookie(format!(
                    "{} belongs to bookie {} instance {}, not instance {}: directories from different bookies",
                    d.display(),
                    c.bookie_id,
                    c.instance_id,
                    cookie.instance_id
                )))
            }
            Some(_) => {}
        }
    }
    if cookie.bookie_id != bookie_id {
        return Err(StorageError::Cookie(format!(
            "the directories belong to bookie {}, but this is bookie {bookie_id}",
            cookie.bookie_id
        )));
    }
    Ok(cookie)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("inst-{n}")
        }
    }

    #[test]
    fn fresh_directories_get_a_cookie_that_is_then_required() {
        let t = tempfile::tempdir().unwrap();
        let (j, l) = (t.path().join("j"), t.path().join("l"));
        let mut id = ids();
        let c = check_or_create("b1", &j, &l, false, &mut id).unwrap();
        assert_eq!(c.instance_id, "inst-1");
        std::fs::write(l.join("data"), b"x").unwrap();
        assert_eq!(check_or_create("b1", &j, &l, false, &mut id).unwrap(), c);
        // Another bookie id cannot take the directories over.
        assert!(check_or_create("b2", &j, &l, false, &mut id).is_err());
    }

    #[test]
    fn a_wiped_disk_is_refused_until_formatted() {
        let t = tempfile::tempdir().unwrap();
        let (j, l) = (t.path().join("j"), t.path().join("l"));
        let mut id = ids();
        let c = check_or_create("b1", &j, &l, false, &mut id).unwrap();
        std::fs::write(j.join("journal-x"), b"x").unwrap();
        std::fs::remove_dir_all(&l).unwrap();
        let err = check_or_create("b1", &j, &l, false, &mut id).unwrap_err();
        assert!(err.to_string().contains("wiped or replaced"), "{err}");
        let again = check_or_create("b1", &j, &l, true, &mut id).unwrap();
        assert_ne!(again.instance_id, c.instance_id, "a formatted bookie is a new instance");
    }
}
