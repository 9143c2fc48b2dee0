//! sled 0.34 made durable.
//!
//! What sled 0.34.7 does on Linux (read in its source, confirmed by strace):
//! `Db::flush` writes its buffers with `pwrite` and waits on
//! `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)`; `sync_all` runs only
//! in its periodic flusher (off here) and when it truncates the file. It never
//! fsyncs a directory: not for `db`, `conf` or `blobs/` at creation, not for
//! a snapshot's rename, not for a blob file (an item over ~128 KiB, written
//! and never synced). So after every flush the caller's data may still be in
//! the page cache, in the inode's size, or only in a directory that a power
//! cut forgets.
//!
//! [`SyncedSled::sync`] runs after `flush()`: it fsyncs each blob file sled
//! made since the last sync and `blobs/` itself, then fdatasyncs `db` through
//! a descriptor of its own (sync_file_range already wrote the pages; the
//! fdatasync commits the size and extents and flushes the device cache).
//! Opening syncs `conf`, `db` and the directories once, and removes the
//! `snap.*.generating` files a power cut can leave (sled would pick such a
//! torn file as its newest snapshot and refuse to open; the log it was made
//! from is still there).
//!
//! What remains of sled's own design: it reuses a freed segment once the
//! copies that superseded it are written (by its `sync_file_range`), not
//! durable; a disk that reorders writes across that point (a volatile cache,
//! or new blocks whose extent is not yet committed) can lose the superseding
//! copy while keeping the overwrite. ARCHITECTURE.md says where quire still
//! depends on it.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::dir::{create_dir_all_durable, sync_dir, sync_parent};

/// Why a sync failed; once one has, every later sync fails with the first error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncError {
    /// sled's own flush failed.
    #[error("sled flush of {path}: {message}")]
    Flush { path: PathBuf, message: String },
    /// An fsync failed: what was written may be lost, and a later fsync
    /// would not say so.
    #[error("fsync of {path}: {message}; this database no longer syncs (fail-stop)")]
    Fsync { path: PathBuf, message: String },
}

#[derive(Debug)]
struct Inner {
    db_file: File,
    synced_blobs: HashSet<std::ffi::OsString>,
    failed: Option<SyncError>,
}

/// The files under one sled directory, synced for real after each flush.
#[derive(Debug)]
pub struct SyncedSled {
    dir: PathBuf,
    inner: Mutex<Inner>,
}

impl SyncedSled {
    /// Opens sled with `config` at `dir` (which the config must name) and
    /// makes what the open created durable.
    pub fn open(config: ::sled::Config, dir: &Path) -> Result<(::sled::Db, SyncedSled), io::Error> {
        create_dir_all_durable(dir)?;
        remove_partial_snapshots(dir)?;
        let db = config.open().map_err(io::Error::other)?;
        let db_file = File::open(dir.join("db"))?;
        let conf = dir.join("conf");
        if conf.exists() {
            File::open(&conf)?.sync_all()?;
        }
        db_file.sync_all()?;
        let blobs = dir.join("blobs");
        let mut synced_blobs = HashSet::new();
        if blobs.is_dir() {
            for e in std::fs::read_dir(&blobs)? {
                let e = e?;
                File::open(e.path())?.sync_all()?;
                synced_blobs.insert(e.file_name());
            }
            sync_dir(&blobs)?;
        }
        sync_dir(dir)?;
        sync_parent(dir)?;
        let inner = Inner { db_file, synced_blobs, failed: None };
        Ok((db, SyncedSled { dir: dir.to_path_buf(), inner: Mutex::new(inner) }))
    }

    /// `db.flush()`, then the fsyncs that make it durable. Blocking: call it
    /// off an async runtime's threads. After a failure every call fails.
    pub fn flush(&self, db: &::sled::Db) -> Result<(), SyncError> {
        if let Some(e) = self.failed() {
            return Err(e);
        }
        if let Err(e) = db.flush() {
            // A failed write or sync_file_range is a writeback error like a
            // failed fsync: nothing after it may be called durable.
            let e = SyncError::Flush { path: self.dir.clone(), message: e.to_string() };
            tracing::error!(error = %e, "sled flush failed: refusing every later sync");
            self.inner.lock().unwrap_or_else(|p| p.into_inner()).failed.get_or_insert(e.clone());
            return Err(e);
        }
        self.sync()
    }

    /// The fsyncs after a flush that already happened.
    pub fn sync(&self) -> Result<(), SyncError> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = &inner.failed {
            return Err(e.clone());
        }
        let res = self.sync_locked(&mut inner);
        if let Err(e) = &res {
            tracing::error!(error = %e, "sled sync failed: refusing every later sync");
            inner.failed = Some(e.clone());
        }
        res
    }

    /// The first failure, if a sync has failed.
    pub fn failed(&self) -> Option<SyncError> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).failed.clone()
    }

    fn sync_locked(&self, inner: &mut Inner) -> Result<(), SyncError> {
        let fsync_err =
            |path: &Path, e: io::Error| SyncError::Fsync { path: path.to_path_buf(), message: e.to_string() };
        let blobs = self.dir.join("blobs");
        // Every blob file, every time: one sled is still writing when it is
        // listed would otherwise be synced half written and never again
        // (an fsync of a file with nothing dirty costs next to nothing).
        // The directory is synced when a name is new.
        match std::fs::read_dir(&blobs) {
            Ok(rd) => {
                let mut present = HashSet::new();
                let mut new = false;
                for e in rd {
                    let e = e.map_err(|e| fsync_err(&blobs, e))?;
                    match File::open(e.path()) {
                        Ok(f) => f.sync_all().map_err(|err| fsync_err(&e.path(), err))?,
                        // Deleted by sled meanwhile: nothing to make durable.
                        Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                        Err(err) => return Err(fsync_err(&e.path(), err)),
                    }
                    new |= !inner.synced_blobs.contains(&e.file_name());
                    present.insert(e.file_name());
                }
                if new {
                    sync_dir(&blobs).map_err(|e| fsync_err(&blobs, e))?;
                }
                inner.synced_blobs = present;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(fsync_err(&blobs, e)),
        }
        inner.db_file.sync_data().map_err(|e| fsync_err(&self.dir.join("db"), e))
    }
}

/// Removes `snap.*.generating`: snapshots sled began and a crash cut short.
/// sled 0.34.7 skips names ending `.in___motion` where it means these, and
/// would read a torn one as its newest snapshot.
fn remove_partial_snapshots(dir: &Path) -> io::Result<()> {
    let mut removed = false;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            tracing::warn!(file = %e.path().display(), "removing a sled snapshot a crash cut short");
            std::fs::remove_file(e.path())?;
            removed = true;
        }
    }
    if removed {
        sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_syncs_and_reopens() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a/db");
        {
            let (db, synced) = SyncedSled::open(::sled::Config::new().path(&dir).flush_every_ms(None), &dir).unwrap();
            db.insert(b"k", vec![7u8; 200_000]).unwrap(); // over the blob threshold
            synced.flush(&db).unwrap();
        }
        std::fs::write(dir.join("snap.0000000000000001.generating"), b"torn").unwrap();
        let (db, _) = SyncedSled::open(::sled::Config::new().path(&dir).flush_every_ms(None), &dir).unwrap();
        assert_eq!(db.get(b"k").unwrap().unwrap().len(), 200_000);
        assert!(!dir.join("snap.0000000000000001.generating").exists());
    }
}
