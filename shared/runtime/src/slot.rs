//! Numbered identities for the replicas of one service (`docker compose up
//! --scale bookie=6`): every replica starts with the same options, and each
//! takes the lowest free id under an exclusive lock on `<dir>/<id>.lock`,
//! held for its lifetime. The lock goes with the process (crash included),
//! so a replacement takes the freed id, its certificate and its data
//! directory again. The directory must be shared by the replicas (a volume)
//! and on a filesystem where flock(2) is shared between them (local).

use std::fs::File;
use std::path::Path;

use anyhow::Context;

/// Ids tried, at most.
pub const MAX_SLOTS: u32 = 1024;

/// A claimed id; the claim lasts as long as this value.
#[derive(Debug)]
pub struct Slot {
    /// The id taken.
    pub id: u32,
    _lock: File,
}

/// Takes the lowest id in `1..=MAX_SLOTS` no live process holds.
pub fn claim(dir: &Path) -> anyhow::Result<Slot> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    for id in 1..=MAX_SLOTS {
        let path = dir.join(format!("{id}.lock"));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))?;
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(Slot { id, _lock: f }),
            Err(rustix::io::Errno::WOULDBLOCK) => continue,
            Err(e) => return Err(e).with_context(|| format!("lock {}", path.display())),
        }
    }
    anyhow::bail!("all {MAX_SLOTS} ids in {} are taken", dir.display())
}

/// `template` with `{id}` replaced by `id` (data directories per replica).
pub fn expand(template: &Path, id: &str) -> std::path::PathBuf {
    template.to_string_lossy().replace("{id}", id).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_take_the_lowest_free_ids_and_a_freed_one_is_taken_again() {
        let t = tempfile::tempdir().unwrap();
        let a = claim(t.path()).unwrap();
        let b = claim(t.path()).unwrap();
        let c = claim(t.path()).unwrap();
        assert_eq!((a.id, b.id, c.id), (1, 2, 3));
        drop(b);
        assert_eq!(claim(t.path()).unwrap().id, 2, "the lock went with its holder");
    }

    #[test]
    fn ids_fill_templates() {
        assert_eq!(expand(Path::new("/data/bookie-{id}"), "7"), Path::new("/data/bookie-7"));
        assert_eq!(expand(Path::new("/data/plain"), "7"), Path::new("/data/plain"));
    }
}
