//! The inode table: FUSE inode numbers to where each file is in the backing
//! directory (or in the trash, while an unsynced unlink could still be undone).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub(crate) const ROOT: u64 = 1;

#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// Named in the tree, at this path of the backing directory.
    Live(PathBuf),
    /// Unlinked (or replaced by a rename) while that could still be undone: kept here.
    Trash(PathBuf),
    /// Gone for good.
    Gone,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub place: Place,
}

/// Inode numbers are never reused within one mount (FUSE requires that while
/// the kernel may still refer to one; a crash ends the mount).
#[derive(Debug)]
pub(crate) struct Nodes {
    nodes: HashMap<u64, Node>,
    live: HashMap<PathBuf, u64>,
    next: u64,
}

impl Nodes {
    pub(crate) fn new(root: &Path) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT, Node { place: Place::Live(root.to_path_buf()) });
        let mut live = HashMap::new();
        live.insert(root.to_path_buf(), ROOT);
        Nodes { nodes, live, next: ROOT + 1 }
    }

    pub(crate) fn get(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    /// The live path of `ino`, if it is named in the tree.
    pub(crate) fn live_path(&self, ino: u64) -> Option<&Path> {
        match self.nodes.get(&ino).map(|n| &n.place) {
            Some(Place::Live(p)) => Some(p),
            _ => None,
        }
    }

    /// Where `ino`'s bytes are now (named or in the trash).
    pub(crate) fn data_path(&self, ino: u64) -> Option<&Path> {
        match self.nodes.get(&ino).map(|n| &n.place) {
            Some(Place::Live(p)) | Some(Place::Trash(p)) => Some(p),
            _ => None,
        }
    }

    /// The inode named `path`, numbered now if the kernel has not seen it before.
    pub(crate) fn intern(&mut self, path: &Path) -> u64 {
        if let Some(ino) = self.live.get(path) {
            return *ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, Node { place: Place::Live(path.to_path_buf()) });
        self.live.insert(path.to_path_buf(), ino);
        ino
    }

    /// Moves `from` (and, for a directory, everything under it) to `to`:
    /// live (named) or into the trash.
    pub(crate) fn relocate(&mut self, from: &Path, to: &Path, live: bool) {
        let mut moved = Vec::new();
        for (ino, node) in self.nodes.iter_mut() {
            let p = match &node.place {
                Place::Live(p) | Place::Trash(p) => p,
                Place::Gone => continue,
            };
            if let Ok(rest) = p.strip_prefix(from) {
                let new = if rest.as_os_str().is_empty() { to.to_path_buf() } else { to.join(rest) };
                let was_live = matches!(node.place, Place::Live(_));
                moved.push((*ino, p.clone(), new.clone(), was_live));
                node.place = if live { Place::Live(new) } else { Place::Trash(new) };
            }
        }
        for (ino, old, new, was_live) in moved {
            if was_live {
                self.live.remove(&old);
            }
            if live {
                self.live.insert(new, ino);
            }
        }
    }

    /// `ino` and everything under it are gone for good.
    pub(crate) fn bury(&mut self, path: &Path) {
        for node in self.nodes.values_mut() {
            let under = match &node.place {
                Place::Live(p) | Place::Trash(p) => p.starts_with(path),
                Place::Gone => false,
            };
            if under {
                if let Place::Live(p) = &node.place {
                    self.live.remove(p);
                }
                node.place = Place::Gone;
            }
        }
    }
}
