//! Rules ARCHITECTURE.md states about the whole workspace, checked over its
//! sources so that a new binary cannot quietly break them.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Every binary's entry point in the workspace: `src/main.rs`,
/// `src/bin/NAME.rs` and `src/bin/NAME/main.rs` of each member crate.
fn entry_points(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for group in ["services", "shared", "faults"] {
        let crates: Vec<PathBuf> = if group == "faults" {
            vec![root.join(group)]
        } else {
            std::fs::read_dir(root.join(group)).unwrap().map(|e| e.unwrap().path()).collect()
        };
        for krate in crates {
            let main = krate.join("src/main.rs");
            if main.exists() {
                out.push(main);
            }
            let Ok(bins) = std::fs::read_dir(krate.join("src/bin")) else { continue };
            for b in bins {
                let p = b.unwrap().path();
                if p.is_dir() {
                    out.push(p.join("main.rs"));
                } else if p.extension().is_some_and(|e| e == "rs") {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_binary_installs_the_global_allocator() {
    let bins = entry_points(&root());
    assert!(bins.len() >= 9, "too few binaries found: {bins:?}");
    let without: Vec<_> =
        bins.iter().filter(|p| !std::fs::read_to_string(p).unwrap().contains("#[global_allocator]")).collect();
    assert!(without.is_empty(), "binaries on the system allocator (ARCHITECTURE.md says mimalloc): {without:?}");
}
