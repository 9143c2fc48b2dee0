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

/// The role whose keys a deployment's service may hold.
fn role_of_service(service: &str) -> &str {
    match service {
        s if s.starts_with("metadata") => "metadata",
        s => s,
    }
}

/// `certs-<x>` volume and `quire-certs-<x>` secret names mentioned in `text`.
fn cert_stores(text: &str, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = text
        .match_indices(prefix)
        .map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            rest[..rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(rest.len())].to_string()
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn compose_gives_each_service_only_its_own_roles_keys() {
    let text = std::fs::read_to_string(root().join("deploy/compose.yaml")).unwrap();
    // The check reads the short volume syntax; a long one would slip past it.
    assert!(!text.contains("source:"), "compose.yaml uses the long volume syntax: extend this check");
    let services = &text[text.find("\nservices:\n").unwrap()..text.find("\nvolumes:\n").unwrap()];
    // Service blocks start at two spaces of indent.
    let mut blocks: Vec<(String, String)> = Vec::new();
    for line in services.lines().skip(2) {
        if let Some(name) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ') && l.ends_with(':')) {
            blocks.push((name.trim_end_matches(':').to_string(), String::new()));
        } else if let Some((_, body)) = blocks.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    // Every service but the third-party observability ones.
    let quire: Vec<_> = blocks.iter().filter(|(_, b)| !b.contains("profiles: [\"observability\"]")).collect();
    assert_eq!(quire.len(), 9, "certs, admin, 3 metadata replicas, bookie, auditor, replication-worker, gateway");
    for (name, body) in quire {
        let stores = cert_stores(body, "\"certs-");
        match name.as_str() {
            // The one step that issues certificates holds the CA key.
            "certs" => assert!(stores.contains(&"ca".to_string()) && stores.len() == 8, "{stores:?}"),
            // The operator's command line: the admin key alone.
            "admin" => assert_eq!(stores, ["admin"], "{name}"),
            service => {
                let role = role_of_service(service);
                assert_eq!(stores, [role], "{name} mounts {stores:?}: a service holds its own role's keys only");
                if body.contains("\"ping\"") {
                    assert!(
                        body.contains(&format!("\"--as-role\", \"{role}\"")),
                        "{name}'s health check needs a key it lacks"
                    );
                }
            }
        }
    }
}

#[test]
fn kubernetes_pods_run_unprivileged_with_their_own_roles_secret() {
    let dir = root().join("deploy/k8s");
    let mut pods = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        for doc in std::fs::read_to_string(&path).unwrap().split("\n---\n") {
            let Some(i) = doc.find("image: quire-") else { continue };
            let image = &doc[i + "image: quire-".len()..];
            let role = &image[..image.find(':').unwrap()];
            pods += 1;
            let at = format!("{} ({role})", path.display());
            assert_eq!(cert_stores(doc, "quire-certs-"), [role], "{at}: a pod mounts its own role's secret only");
            assert!(!doc.contains("secretName: quire-certs}"), "{at}: the all-keys secret");
            for rule in [
                "runAsNonRoot: true",
                "runAsUser: 10001",
                "readOnlyRootFilesystem: true",
                "allowPrivilegeEscalation: false",
            ] {
                assert!(doc.contains(rule), "{at}: missing {rule}");
            }
            if doc.contains("ping") {
                assert!(doc.contains(&format!("--as-role, {role}]")), "{at}: the probe needs a key the pod lacks");
            }
        }
    }
    assert_eq!(pods, 5, "metadata, bookie, auditor, replication-worker, gateway");
}

/// The budgets deploy/k8s gives a drain (issue #49): one metadata replica
/// at most (a Raft majority of three stays), and no more bookies at once
/// than the default ledger's Qw - Qa (every acknowledged entry keeps a copy
/// that answers). A change of the defaults must change the budget.
#[test]
fn kubernetes_drains_keep_a_raft_majority_and_every_acknowledged_copy() {
    let text = std::fs::read_to_string(root().join("deploy/k8s/50-disruption.yaml")).unwrap();
    let budget = |app: &str| -> u64 {
        let doc = text
            .split("\n---\n")
            .find(|d| d.contains("kind: PodDisruptionBudget") && d.contains(&format!("app: {app}}}")))
            .unwrap_or_else(|| panic!("no PodDisruptionBudget selects {app}"));
        let line = doc.lines().find(|l| l.trim_start().starts_with("maxUnavailable:")).expect("maxUnavailable");
        line.split(':').nth(1).unwrap().trim().parse().unwrap()
    };
    let d = quire_client::CreateLedger::default();
    assert_eq!(budget("quire-metadata"), 1, "a majority of 3 replicas survives one down");
    assert_eq!(budget("quire-bookie"), (d.write_quorum - d.ack_quorum) as u64, "Qw - Qa of the default ledger");
    let metadata = std::fs::read_to_string(root().join("deploy/k8s/10-metadata.yaml")).unwrap();
    assert!(
        metadata.contains("topologyKey: kubernetes.io/hostname")
            && metadata.contains("whenUnsatisfiable: DoNotSchedule"),
        "metadata replicas are spread over nodes"
    );
}
