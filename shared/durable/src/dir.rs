//! Directories made and changed durably.

use std::io;
use std::path::{Path, PathBuf};

/// fsyncs a directory: its entries (files made, renamed, removed in it) are durable after this.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// fsyncs the directory holding `path`.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => sync_dir(p),
        _ => sync_dir(Path::new(".")),
    }
}

/// `create_dir_all`, then an fsync of the parent of every level it made (and
/// of `dir` itself), so that a power cut right after cannot take the
/// directories away. Levels that already existed are synced too when a new
/// level was made under them: cheap, and it covers a crash between an
/// earlier call's mkdir and its sync.
pub fn create_dir_all_durable(dir: &Path) -> io::Result<()> {
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut at = Some(dir);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || p.exists() {
            break;
        }
        missing.push(p.to_path_buf());
        at = p.parent();
    }
    std::fs::create_dir_all(dir)?;
    for made in missing.iter().rev() {
        sync_parent(made)?;
    }
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_every_missing_level() {
        let t = tempfile::tempdir().unwrap();
        let deep = t.path().join("a/b/c");
        create_dir_all_durable(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_all_durable(&deep).unwrap();
    }
}
