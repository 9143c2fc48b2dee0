//! Certificate roles and the authorisation table.
//!
//! A certificate names its holder as the SAN URI `quire://<role>/<id>`. Servers
//! authorise every request by the caller's role with [`allowed`]; the table is
//! reproduced in ARCHITECTURE.md and a test keeps the two in step.

use crate::method::Method;
use crate::v1;

/// The role a certificate grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A storage node.
    Bookie,
    /// A metadata replica.
    Metadata,
    /// The auditor.
    Auditor,
    /// A re-replication worker.
    ReplicationWorker,
    /// The HTTP gateway.
    Gateway,
    /// An application embedding the client library.
    Client,
    /// The operator CLI.
    Admin,
}

/// A role name that is not one of quire's.
#[derive(Debug, thiserror::Error)]
#[error("unknown role {0:?}; expected one of bookie, metadata, auditor, replication-worker, gateway, client, admin")]
pub struct UnknownRole(pub String);

impl Role {
    /// Every role.
    pub const ALL: &'static [Role] = &[
        Role::Bookie,
        Role::Metadata,
        Role::Auditor,
        Role::ReplicationWorker,
        Role::Gateway,
        Role::Client,
        Role::Admin,
    ];

    /// The name used in certificates, file names and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Bookie => "bookie",
            Role::Metadata => "metadata",
            Role::Auditor => "auditor",
            Role::ReplicationWorker => "replication-worker",
            Role::Gateway => "gateway",
            Role::Client => "client",
            Role::Admin => "admin",
        }
    }

    /// The TLS server name a server of this role presents and its callers verify
    /// (a DNS SAN in its certificate). Addresses change; the name does not.
    pub fn server_name(self) -> String {
        format!("{}.quire", self.as_str())
    }

    /// The wire enum.
    pub fn to_wire(self) -> v1::Role {
        match self {
            Role::Bookie => v1::Role::Bookie,
            Role::Metadata => v1::Role::Metadata,
            Role::Auditor => v1::Role::Auditor,
            Role::ReplicationWorker => v1::Role::ReplicationWorker,
            Role::Gateway => v1::Role::Gateway,
            Role::Client => v1::Role::Client,
            Role::Admin => v1::Role::Admin,
        }
    }

    /// From the wire enum; `None` for ROLE_UNSPECIFIED.
    pub fn from_wire(r: v1::Role) -> Option<Role> {
        Some(match r {
            v1::Role::Unspecified => return None,
            v1::Role::Bookie => Role::Bookie,
            v1::Role::Metadata => Role::Metadata,
            v1::Role::Auditor => Role::Auditor,
            v1::Role::ReplicationWorker => Role::ReplicationWorker,
            v1::Role::Gateway => Role::Gateway,
            v1::Role::Client => Role::Client,
            v1::Role::Admin => Role::Admin,
        })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL.iter().copied().find(|r| r.as_str() == s).ok_or_else(|| UnknownRole(s.to_string()))
    }
}

/// Whether a caller holding `role` may invoke `method`.
///
/// The principle: a role gets exactly what its service's work needs. Writers
/// (gateway, client, replication-worker, admin) may add and fence; anything
/// that reads ledgers may read entries; only bookies hold registry leases; only
/// metadata replicas speak Raft.
pub fn allowed(role: Role, method: Method) -> bool {
    use Method::*;
    use Role::*;
    let writer = matches!(role, Gateway | Client | ReplicationWorker | Admin);
    match method {
        Ping | ServerInfo | BookieInfo => true,
        AddEntry | AddEntries | WriteLac | FenceLedger => writer,
        // Bookies read from their peers to refill entries they lost (integrity check).
        ReadEntry | ReadEntries | ReadLac | WaitLac => writer || matches!(role, Auditor | Bookie),
        // Replica checks: the auditor, workers, a bookie checking its peers.
        CheckEntries => matches!(role, Auditor | ReplicationWorker | Bookie | Admin),
        // Garbage collection runs on its own schedule; forcing a pass is the operator's.
        RunGc => role == Admin,
        // Creating and deleting ledgers is the application's (and operator's) business.
        CreateLedger | DeleteLedger => matches!(role, Gateway | Client | Admin),
        // Ensemble changes, recovery and re-replication update metadata.
        UpdateLedger => writer,
        // Bookies read ledger state (first add of an unknown ledger, GC) and the registry.
        GetLedger | ListLedgers | WatchLedger | ListBookies | WatchBookies => true,
        RegisterBookie | RenewLease => role == Bookie,
        // Autorecovery's bookkeeping: the auditor marks, workers repair and
        // clear; a writer marks the copies it sent that no bookie confirmed;
        // a bookie in its integrity check marks its own open ledgers in
        // limbo (the metadata service lets it name only itself).
        MarkUnderReplicated => matches!(role, Auditor | ReplicationWorker | Gateway | Client | Admin | Bookie),
        ClearUnderReplicated => matches!(role, Auditor | ReplicationWorker | Admin),
        ListUnderReplicated | GetLock => matches!(role, Auditor | ReplicationWorker | Gateway | Admin),
        // Bookies take a ledger's re-replication lock before dropping copies
        // no ensemble names them for, so no worker is copying to them meanwhile.
        // Gateways (and applications) hold a log's ownership lock (`log/<name>`).
        AcquireLock | RenewLock | ReleaseLock => {
            matches!(role, Auditor | ReplicationWorker | Bookie | Admin | Gateway | Client)
        }
        Raft => role == Metadata,
        ChangeMembership => role == Admin,
        MetadataStatus => true,
        // The operator decommissions (directly or through the gateway); the
        // auditor retires a drained bookie.
        SetBookieState => matches!(role, Gateway | Admin | Auditor),
        GetBookie => !matches!(role, Metadata),
        PutAuditReport => role == Auditor,
        // Revoking a certificate is the operator's; every service follows
        // the list to refuse revoked peers.
        RevokeCertificate => role == Admin,
        ListRevoked => true,
        // Logs are the applications' (and the operator's); the retention
        // service beside the auditor trims them; anything may read one.
        CreateLog | DeleteLog | PutCursor | DeleteCursor => matches!(role, Gateway | Client | Admin),
        UpdateLog => matches!(role, Gateway | Client | Admin | Auditor),
        GetLog | ListLogs | WatchLog | GetCursor => !matches!(role, Metadata | Bookie),
    }
}

/// Whether `role` may send replication adds: copies from another replica,
/// which bypass fencing (workers, a bookie refilling itself, the operator;
/// never a writer, whose adds fencing must stop).
pub fn may_replicate(role: Role) -> bool {
    matches!(role, Role::ReplicationWorker | Role::Bookie | Role::Admin)
}

/// Whether `role` may take the lock `name` (beyond `AcquireLock`'s right):
/// each role only the locks its work needs. `auditor` (one active auditor)
/// is the auditor's; `replicate/<ledger id>` (one repair of a ledger at a
/// time; a bookie takes it before dropping copies no ensemble names it for)
/// is the workers' and bookies'; the operator may take any (to pause
/// autorecovery, or a repair).
pub fn may_lock(role: Role, name: &str) -> bool {
    if role == Role::Admin {
        return true;
    }
    if name == "auditor" {
        return role == Role::Auditor;
    }
    if let Some(log) = name.strip_prefix("log/") {
        // One writer of a log at a time among gateways (issue #23).
        return matches!(role, Role::Gateway | Role::Client) && !log.is_empty();
    }
    match name.strip_prefix("replicate/").map(str::parse::<u64>) {
        Some(Ok(_)) => matches!(role, Role::ReplicationWorker | Role::Bookie),
        _ => false,
    }
}

/// Rights a request's body asks for beyond its method's (checked by the RPC
/// server after [`allowed`], before the service sees the request):
/// - a fencing read (`ReadEntry` with `fence`) fences the ledger, so it
///   needs `FenceLedger`'s right, not only `ReadEntry`'s;
/// - a replication add (`AddEntry`/`AddEntries` with `replication`) needs
///   [`may_replicate`].
///
/// The refusal's reason, or `Ok`.
pub fn allowed_body(role: Role, body: &v1::request_frame::Body) -> Result<(), String> {
    use v1::request_frame::Body as B;
    match body {
        B::ReadEntry(r) if r.fence && !allowed(role, Method::FenceLedger) => {
            Err(format!("role {role} may not fence a ledger: a fencing ReadEntry needs FenceLedger's right"))
        }
        B::AddEntry(a) if a.replication && !may_replicate(role) => {
            Err(format!("role {role} may not send replication adds"))
        }
        B::AddEntries(b) if b.adds.iter().any(|a| a.replication) && !may_replicate(role) => {
            Err(format!("role {role} may not send replication adds"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_round_trip() {
        for r in Role::ALL {
            assert_eq!(r.as_str().parse::<Role>().unwrap(), *r);
            assert_eq!(Role::from_wire(r.to_wire()), Some(*r));
        }
        assert!("root".parse::<Role>().is_err());
    }

    #[test]
    fn sensitive_methods_are_narrow() {
        assert!(!allowed(Role::Bookie, Method::AddEntry));
        assert!(!allowed(Role::Auditor, Method::AddEntry));
        assert!(!allowed(Role::Gateway, Method::Raft));
        assert!(allowed(Role::Metadata, Method::Raft));
        assert!(!allowed(Role::Gateway, Method::RegisterBookie));
        assert!(allowed(Role::Bookie, Method::RegisterBookie));
        assert!(allowed(Role::ReplicationWorker, Method::AddEntry));
        // Writers report copies no bookie confirmed; only repairs clear marks.
        assert!(allowed(Role::Client, Method::MarkUnderReplicated));
        assert!(!allowed(Role::Client, Method::ClearUnderReplicated));
        assert!(!allowed(Role::Gateway, Method::ClearUnderReplicated));
    }

    #[test]
    fn a_fencing_read_needs_the_right_to_fence_and_a_copy_the_right_to_replicate() {
        use v1::request_frame::Body as B;
        let read = |fence| B::ReadEntry(v1::ReadEntryRequest { ledger_id: 1, entry_id: 0, fence, metadata_version: 1 });
        for role in Role::ALL {
            assert!(allowed_body(*role, &read(false)).is_ok());
            assert_eq!(allowed_body(*role, &read(true)).is_ok(), allowed(*role, Method::FenceLedger), "{role}");
        }
        // The auditor and bookies read entries, and may not fence by reading.
        assert!(allowed(Role::Auditor, Method::ReadEntry) && allowed_body(Role::Auditor, &read(true)).is_err());
        assert!(allowed(Role::Bookie, Method::ReadEntry) && allowed_body(Role::Bookie, &read(true)).is_err());
        let copy = v1::AddEntryRequest { replication: true, ..Default::default() };
        let plain = v1::AddEntryRequest::default();
        let batch = |adds| B::AddEntries(v1::AddEntriesRequest { adds });
        assert!(allowed_body(Role::Client, &B::AddEntry(copy.clone())).is_err());
        assert!(allowed_body(Role::Gateway, &batch(vec![plain.clone(), copy.clone()])).is_err());
        assert!(allowed_body(Role::Client, &batch(vec![plain.clone()])).is_ok());
        assert!(allowed_body(Role::ReplicationWorker, &batch(vec![copy])).is_ok());
    }

    #[test]
    fn each_role_takes_only_the_locks_its_work_needs() {
        assert!(may_lock(Role::Auditor, "auditor"));
        assert!(!may_lock(Role::Bookie, "auditor"), "a bookie could stop autorecovery");
        assert!(!may_lock(Role::ReplicationWorker, "auditor"));
        assert!(may_lock(Role::ReplicationWorker, "replicate/7"));
        assert!(may_lock(Role::Bookie, "replicate/7"));
        assert!(!may_lock(Role::Auditor, "replicate/7"));
        assert!(!may_lock(Role::Bookie, "replicate/x"));
        assert!(!may_lock(Role::Bookie, "anything"));
        assert!(may_lock(Role::Admin, "auditor") && may_lock(Role::Admin, "replicate/7"));
        assert!(may_lock(Role::Gateway, "log/orders") && may_lock(Role::Client, "log/orders"));
        assert!(!may_lock(Role::Gateway, "auditor") && !may_lock(Role::Gateway, "replicate/7"));
        assert!(!may_lock(Role::Bookie, "log/orders") && !may_lock(Role::Gateway, "log/"));
    }

    /// ARCHITECTURE.md carries this table; on a mismatch the test prints the
    /// table to paste there.
    #[test]
    fn architecture_md_role_table_matches() {
        let doc = include_str!("../../../ARCHITECTURE.md");
        let rows: Vec<String> = Method::ALL
            .iter()
            .map(|m| {
                let roles: Vec<&str> = Role::ALL.iter().filter(|r| allowed(**r, *m)).map(|r| r.as_str()).collect();
                format!("| `{}` | {} |", m.name(), roles.join(", "))
            })
            .collect();
        let missing: Vec<&String> = rows.iter().filter(|r| !doc.contains(r.as_str())).collect();
        assert!(
            missing.is_empty(),
            "ARCHITECTURE.md's role table is stale; it should read:\n| method | roles allowed |\n|---|---|\n{}",
            rows.join("\n")
        );
    }
}
