//! Namespace changes (create, mkdir, unlink, rmdir, rename) that no fsync of
//! their directory has made durable yet, and how a crash undoes them.
//!
//! A change waits on each directory it touched (a rename on both); an fsync of
//! a directory clears it from that directory's changes. This is POSIX's rule,
//! stricter than ext4's (one journal per filesystem: any fsync there commits
//! every pending namespace change, which hides a missing directory fsync).

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::nodes::{Nodes, Place};
use crate::rng::Rng;
use crate::NameLoss;

#[derive(Debug, Clone)]
pub(crate) enum NameOp {
    /// A file or directory made under `parent`.
    Made { parent: u64, name: OsString, ino: u64 },
    /// Unlinked or removed; its bytes wait in the trash.
    Removed { parent: u64, name: OsString, ino: u64 },
    /// Renamed; `replaced` is the inode the rename put in the trash.
    Moved { from: (u64, OsString), to: (u64, OsString), ino: u64, replaced: Option<u64> },
}

#[derive(Debug)]
struct Pending {
    op: NameOp,
    /// Directories whose fsync it still waits for.
    waits: Vec<u64>,
}

/// Where unlinked inodes wait while their unlink could be undone.
#[derive(Debug)]
pub(crate) struct Trash {
    dir: PathBuf,
    next: u64,
}

impl Trash {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Trash { dir, next: 0 }
    }

    pub(crate) fn slot(&mut self) -> PathBuf {
        self.next += 1;
        self.dir.join(self.next.to_string())
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

#[derive(Debug, Default)]
pub(crate) struct Names {
    pending: Vec<Pending>,
}

impl Names {
    pub(crate) fn push(&mut self, op: NameOp) {
        let mut waits = match &op {
            NameOp::Made { parent, .. } | NameOp::Removed { parent, .. } => vec![*parent],
            NameOp::Moved { from, to, .. } => vec![from.0, to.0],
        };
        waits.dedup();
        self.pending.push(Pending { op, waits });
    }

    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// `dir` was fsynced: the changes that waited only on it are durable.
    /// Returns the inodes now gone for good (a durable unlink's, a durable
    /// rename's replaced one), whose trash copies can go.
    pub(crate) fn dir_synced(&mut self, dir: u64) -> Vec<u64> {
        let mut gone = Vec::new();
        self.pending.retain_mut(|p| {
            p.waits.retain(|d| *d != dir);
            if !p.waits.is_empty() {
                return true;
            }
            match &p.op {
                NameOp::Removed { ino, .. } => gone.push(*ino),
                NameOp::Moved { replaced: Some(r), .. } => gone.push(*r),
                _ => {}
            }
            false
        });
        gone
    }

    /// Undoes the pending changes a power cut loses: all of them, or all but a
    /// random prefix. Returns (undone, kept).
    pub(crate) fn roll_back(
        &self,
        nodes: &mut Nodes,
        trash: &mut Trash,
        mode: NameLoss,
        rng: &mut Rng,
    ) -> io::Result<(u64, u64)> {
        let n = self.pending.len();
        let keep = match mode {
            NameLoss::All => 0,
            NameLoss::Prefix => rng.below(n as u64 + 1) as usize,
        };
        for p in self.pending[keep..].iter().rev() {
            undo(&p.op, nodes, trash)?;
        }
        Ok(((n - keep) as u64, keep as u64))
    }
}

fn child(nodes: &Nodes, parent: u64, name: &OsString) -> Option<PathBuf> {
    nodes.live_path(parent).map(|p| p.join(name))
}

fn move_path(nodes: &mut Nodes, from: &Path, to: &Path, live: bool) -> io::Result<()> {
    std::fs::rename(from, to)?;
    nodes.relocate(from, to, live);
    Ok(())
}

fn undo(op: &NameOp, nodes: &mut Nodes, trash: &mut Trash) -> io::Result<()> {
    match op {
        NameOp::Made { parent, name, ino } => {
            let Some(path) = child(nodes, *parent, name) else { return Ok(()) };
            if nodes.live_path(*ino) == Some(path.as_path()) {
                let slot = trash.slot();
                move_path(nodes, &path, &slot, false)?;
            }
        }
        NameOp::Removed { parent, name, ino } => {
            let Some(path) = child(nodes, *parent, name) else { return Ok(()) };
            if let Some(Place::Trash(kept)) = nodes.get(*ino).map(|n| n.place.clone()) {
                if std::fs::symlink_metadata(&path).is_err() {
                    move_path(nodes, &kept, &path, true)?;
                }
            }
        }
        NameOp::Moved { from, to, ino, replaced } => {
            let (Some(from_path), Some(to_path)) = (child(nodes, from.0, &from.1), child(nodes, to.0, &to.1)) else {
                return Ok(());
            };
            if nodes.live_path(*ino) == Some(to_path.as_path()) && std::fs::symlink_metadata(&from_path).is_err() {
                move_path(nodes, &to_path, &from_path, true)?;
            }
            if let Some(r) = replaced {
                if let Some(Place::Trash(kept)) = nodes.get(*r).map(|n| n.place.clone()) {
                    if std::fs::symlink_metadata(&to_path).is_err() {
                        move_path(nodes, &kept, &to_path, true)?;
                    }
                }
            }
        }
    }
    Ok(())
}
