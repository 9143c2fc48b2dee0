//! Which RPC a frame carries, and the typed pairing of requests with responses.

use crate::v1::{self, request_frame::Body as Req, response_frame::Body as Resp};

macro_rules! methods {
    ($( $variant:ident => $req:ident, $resp:ident, $name:literal ;)*) => {
        /// Every RPC of protocol version 1.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Method {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Method {
            /// Every method, for tables and tests.
            pub const ALL: &'static [Method] = &[$(Method::$variant,)*];

            /// The method a request body invokes.
            pub fn of_request(body: &Req) -> Method {
                match body {
                    $( Req::$variant(_) => Method::$variant, )*
                }
            }

            /// The method a response body answers.
            pub fn of_response(body: &Resp) -> Method {
                match body {
                    $( Resp::$variant(_) => Method::$variant, )*
                }
            }

            /// A stable name for logs, spans and metrics.
            pub fn name(self) -> &'static str {
                match self {
                    $( Method::$variant => $name, )*
                }
            }
        }

        $(
            impl Call for v1::$req {
                type Response = v1::$resp;
                const METHOD: Method = Method::$variant;
                fn into_body(self) -> Req {
                    Req::$variant(self)
                }
                fn from_body(body: Resp) -> Result<Self::Response, Method> {
                    match body {
                        Resp::$variant(r) => Ok(r),
                        other => Err(Method::of_response(&other)),
                    }
                }
            }

            impl From<v1::$resp> for Resp {
                fn from(r: v1::$resp) -> Resp {
                    Resp::$variant(r)
                }
            }
        )*
    };
}

/// A request message together with the response message it expects.
pub trait Call: Sized {
    /// The message a successful call returns.
    type Response;
    /// The RPC this request invokes.
    const METHOD: Method;
    /// Wraps the request for a frame.
    fn into_body(self) -> Req;
    /// Unwraps the matching response, or names the method a mismatched body answers.
    fn from_body(body: Resp) -> Result<Self::Response, Method>;
}

methods! {
    Ping => PingRequest, PingResponse, "ping";
    ServerInfo => ServerInfoRequest, ServerInfoResponse, "server_info";
    AddEntry => AddEntryRequest, AddEntryResponse, "add_entry";
    ReadEntry => ReadEntryRequest, ReadEntryResponse, "read_entry";
    ReadLac => ReadLacRequest, ReadLacResponse, "read_lac";
    WaitLac => WaitLacRequest, WaitLacResponse, "wait_lac";
    WriteLac => WriteLacRequest, WriteLacResponse, "write_lac";
    FenceLedger => FenceLedgerRequest, FenceLedgerResponse, "fence_ledger";
    BookieInfo => BookieInfoRequest, BookieInfoResponse, "bookie_info";
    AddEntries => AddEntriesRequest, AddEntriesResponse, "add_entries";
    CheckEntries => CheckEntriesRequest, CheckEntriesResponse, "check_entries";
    RunGc => RunGcRequest, RunGcResponse, "run_gc";
    ReadEntries => ReadEntriesRequest, ReadEntriesResponse, "read_entries";
    CreateLedger => CreateLedgerRequest, CreateLedgerResponse, "create_ledger";
    GetLedger => GetLedgerRequest, GetLedgerResponse, "get_ledger";
    UpdateLedger => UpdateLedgerRequest, UpdateLedgerResponse, "update_ledger";
    DeleteLedger => DeleteLedgerRequest, DeleteLedgerResponse, "delete_ledger";
    ListLedgers => ListLedgersRequest, ListLedgersResponse, "list_ledgers";
    WatchLedger => WatchLedgerRequest, WatchLedgerResponse, "watch_ledger";
    RegisterBookie => RegisterBookieRequest, RegisterBookieResponse, "register_bookie";
    RenewLease => RenewLeaseRequest, RenewLeaseResponse, "renew_lease";
    ListBookies => ListBookiesRequest, ListBookiesResponse, "list_bookies";
    WatchBookies => WatchBookiesRequest, WatchBookiesResponse, "watch_bookies";
    MarkUnderReplicated => MarkUnderReplicatedRequest, MarkUnderReplicatedResponse, "mark_under_replicated";
    ListUnderReplicated => ListUnderReplicatedRequest, ListUnderReplicatedResponse, "list_under_replicated";
    ClearUnderReplicated => ClearUnderReplicatedRequest, ClearUnderReplicatedResponse, "clear_under_replicated";
    AcquireLock => AcquireLockRequest, AcquireLockResponse, "acquire_lock";
    RenewLock => RenewLockRequest, RenewLockResponse, "renew_lock";
    ReleaseLock => ReleaseLockRequest, ReleaseLockResponse, "release_lock";
    GetLock => GetLockRequest, GetLockResponse, "get_lock";
    ChangeMembership => ChangeMembershipRequest, ChangeMembershipResponse, "change_membership";
    MetadataStatus => MetadataStatusRequest, MetadataStatusResponse, "metadata_status";
    Raft => RaftRequest, RaftResponse, "raft";
    SetBookieState => SetBookieStateRequest, SetBookieStateResponse, "set_bookie_state";
    GetBookie => GetBookieRequest, GetBookieResponse, "get_bookie";
    PutAuditReport => PutAuditReportRequest, PutAuditReportResponse, "put_audit_report";
    RevokeCertificate => RevokeCertificateRequest, RevokeCertificateResponse, "revoke_certificate";
    ListRevoked => ListRevokedRequest, ListRevokedResponse, "list_revoked";
    CreateLog => CreateLogRequest, CreateLogResponse, "create_log";
    GetLog => GetLogRequest, GetLogResponse, "get_log";
    UpdateLog => UpdateLogRequest, UpdateLogResponse, "update_log";
    DeleteLog => DeleteLogRequest, DeleteLogResponse, "delete_log";
    ListLogs => ListLogsRequest, ListLogsResponse, "list_logs";
    WatchLog => WatchLogRequest, WatchLogResponse, "watch_log";
    PutCursor => PutCursorRequest, PutCursorResponse, "put_cursor";
    DeleteCursor => DeleteCursorRequest, DeleteCursorResponse, "delete_cursor";
    GetCursor => GetCursorRequest, GetCursorResponse, "get_cursor";
}

/// The service a method belongs to; a server hosts the control service plus one other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceKind {
    /// Ping and ServerInfo, hosted by every server.
    Control,
    /// Entries, LAC and fencing.
    Bookie,
    /// Ledger metadata, the bookie registry and Raft.
    Metadata,
}

impl Method {
    /// The service that serves this method.
    pub fn service(self) -> ServiceKind {
        use Method::*;
        match self {
            Ping | ServerInfo => ServiceKind::Control,
            AddEntry | AddEntries | ReadEntry | ReadLac | WaitLac | WriteLac | FenceLedger | BookieInfo
            | CheckEntries | RunGc | ReadEntries => ServiceKind::Bookie,
            CreateLedger | GetLedger | UpdateLedger | DeleteLedger | ListLedgers | WatchLedger | RegisterBookie
            | RenewLease | ListBookies | WatchBookies | MarkUnderReplicated | ListUnderReplicated
            | ClearUnderReplicated | AcquireLock | RenewLock | ReleaseLock | GetLock | ChangeMembership
            | MetadataStatus | Raft | SetBookieState | GetBookie | PutAuditReport | RevokeCertificate | ListRevoked
            | CreateLog | GetLog | UpdateLog | DeleteLog | ListLogs | WatchLog | PutCursor | DeleteCursor
            | GetCursor => ServiceKind::Metadata,
        }
    }
}
