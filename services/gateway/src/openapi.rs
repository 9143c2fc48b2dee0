//! The OpenAPI 3 document, generated from the route table in `api.rs` (the
//! same table registers the routes, so the two cannot drift) and the JSON
//! shapes below (which a test checks against real answers).

use serde_json::{json, Map, Value};

/// One route as documented.
pub struct Endpoint {
    /// Lower-case HTTP method.
    pub method: &'static str,
    /// Path with `{param}` segments.
    pub path: &'static str,
    /// The operation's name (a generated client's function name).
    pub operation_id: &'static str,
    /// One line.
    pub summary: &'static str,
    /// Request body kind: "" (none), "raw", "batch", "create", "log_create", "log_batch" or "log_trim".
    pub request: &'static str,
    /// The success body: a schema in [`schemas`], "bytes", "text" or "" (none).
    pub reply: &'static str,
    /// Status codes it answers with.
    pub codes: &'static [u16],
}

fn int() -> Value {
    json!({ "type": "integer", "format": "int64" })
}

fn uint() -> Value {
    json!({ "type": "integer", "format": "uint64", "minimum": 0, "maximum": u64::MAX })
}

/// A quorum size in a create request. The rule across the three
/// (1 <= ack_quorum <= write_quorum <= ensemble, each default 3, 3, 2) is
/// not one JSON Schema can state; a request that breaks it is 400.
fn quorum(about: &str) -> Value {
    json!({
        "type": "integer", "format": "uint64", "minimum": 1, "maximum": MAX_ENSEMBLE, "nullable": true,
        "description": format!("{about}; null or absent: the default"),
    })
}

/// Largest ensemble a create request may ask for: the client's `Quorums`
/// take at most 64 (a write set is a 64-bit mask of ensemble positions).
pub const MAX_ENSEMBLE: u64 = 64;

/// A bookie id as the API takes it.
fn bookie_id() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._-]+$" })
}

fn string() -> Value {
    json!({ "type": "string" })
}

fn object(required: &[&str], props: Value) -> Value {
    json!({ "type": "object", "required": required, "properties": props })
}

fn array_of(items: Value) -> Value {
    json!({ "type": "array", "items": items })
}

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// The JSON bodies the API answers with, by name.
pub fn schemas() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("Error".into(), object(&["error", "message"], json!({ "error": string(), "message": string() })));
    m.insert(
        "PreconditionFailed".into(),
        object(
            &["error", "message", "next_offset"],
            json!({ "error": string(), "message": string(), "next_offset": uint() }),
        ),
    );
    m.insert("Status".into(), object(&["status"], json!({ "status": string(), "bookies": uint() })));
    let ledger_required = [
        "ledger_id",
        "state",
        "ensemble",
        "write_quorum",
        "ack_quorum",
        "ensembles",
        "last_entry_id",
        "length",
        "version",
        "created_at_ms",
        "metadata",
    ];
    let ledger_props = json!({
        "ledger_id": uint(),
        "state": { "type": "string", "enum": ["open", "in_recovery", "closed"] },
        "ensemble": uint(), "write_quorum": uint(), "ack_quorum": uint(),
        "ensembles": array_of(object(&["first_entry_id", "bookies"], json!({
            "first_entry_id": uint(), "bookies": array_of(string()),
        }))),
        "last_entry_id": int(),
        "length": uint(),
        "version": uint(),
        "created_at_ms": uint(),
        "metadata": { "type": "object", "additionalProperties": string() },
    });
    m.insert("Ledger".into(), object(&ledger_required, ledger_props.clone()));
    // The ledger as recovery closed it, and the recovery's phases: whether
    // this call fenced (not when the ledger was closed already), how long
    // fencing took, and the whole call.
    let mut recovered_props = ledger_props;
    recovered_props["recovery"] = object(
        &["fenced", "fence_us", "total_us"],
        json!({
            "fenced": { "type": "boolean" },
            "fence_us": { "type": "integer", "format": "uint64", "minimum": 0, "nullable": true },
            "total_us": uint(),
        }),
    );
    let mut recovered_required = ledger_required.to_vec();
    recovered_required.push("recovery");
    m.insert("Recovered".into(), object(&recovered_required, recovered_props));
    m.insert(
        "LedgerList".into(),
        object(
            &["ledgers", "next"],
            json!({ "ledgers": array_of(uint()), "next": { "type": "integer", "format": "uint64", "nullable": true } }),
        ),
    );
    m.insert("Appended".into(), object(&["entry_id", "lac"], json!({ "entry_id": uint(), "lac": int() })));
    m.insert(
        "AppendedBatch".into(),
        object(&["first_entry_id", "last_entry_id"], json!({ "first_entry_id": uint(), "last_entry_id": uint() })),
    );
    m.insert(
        "Entries".into(),
        object(
            &["entries"],
            json!({ "entries": array_of(object(&["entry_id", "data"], json!({
                "entry_id": uint(), "data": { "type": "string", "format": "byte" },
            }))) }),
        ),
    );
    m.insert("Lac".into(), object(&["lac"], json!({ "lac": int() })));
    let bookie_props = json!({
        "id": string(), "address": string(), "rack": string(),
        "state": { "type": "string", "enum": ["available", "read_only", "decommissioning", "decommissioned", "unknown"] },
        "instance_id": string(), "total_disk_bytes": uint(), "free_disk_bytes": uint(),
    });
    let bookie_required = ["id", "address", "rack", "state", "instance_id", "total_disk_bytes", "free_disk_bytes"];
    m.insert("Bookie".into(), object(&bookie_required, bookie_props.clone()));
    m.insert("BookieList".into(), object(&["bookies"], json!({ "bookies": array_of(reference("Bookie")) })));
    let mut detail_props = bookie_props.as_object().cloned().unwrap_or_default();
    for (k, v) in [
        ("registered", json!({ "type": "boolean" })),
        ("ledgers", uint()),
        ("under_replicated_ledgers", uint()),
        ("decommission_requested_at_ms", uint()),
    ] {
        detail_props.insert(k.into(), v);
    }
    let mut detail_required: Vec<&str> = bookie_required.to_vec();
    detail_required.extend(["registered", "ledgers", "under_replicated_ledgers", "decommission_requested_at_ms"]);
    m.insert("BookieDetail".into(), object(&detail_required, Value::Object(detail_props)));
    m.insert(
        "Cluster".into(),
        object(
            &["metadata", "bookies", "under_replicated_ledgers", "lost_copies", "auditor"],
            json!({
                "metadata": object(&["leader_id", "leader_address", "term", "voters"], json!({
                    "leader_id": { "type": "integer", "format": "uint64", "nullable": true },
                    "leader_address": string(),
                    "term": uint(),
                    "voters": array_of(object(&["id", "address"], json!({ "id": uint(), "address": string() }))),
                })),
                "bookies": array_of(reference("Bookie")),
                "under_replicated_ledgers": uint(),
                "lost_copies": {
                    "type": "integer", "format": "uint64",
                    "description": "copies of acknowledged entries this gateway's writers sent and no bookie confirmed (their ledgers are marked under-replicated)",
                },
                "auditor": { "type": "string", "nullable": true },
                "audit": {
                    "type": "object", "nullable": true,
                    "description": "the active auditor's last report",
                    "properties": {
                        "auditor": string(), "at_ms": uint(), "ledgers_checked": uint(),
                        "lost_bookies": array_of(string()), "draining_bookies": array_of(string()),
                        "ledgers_marked": uint(), "entries_checked": uint(),
                        "entries_missing": uint(), "entries_corrupt": uint(), "retired_bookies": array_of(string()),
                        "replica_check_at_ms": {
                            "type": "integer", "format": "uint64", "minimum": 0,
                            "description": "when the last complete replica check ended (every bookie it had to ask answered); 0: none yet",
                        },
                        "replica_check_started_at_ms": {
                            "type": "integer", "format": "uint64", "minimum": 0,
                            "description": "when that check began: damage done before it was looked for",
                        },
                        "replica_check_unreached": {
                            "type": "array", "items": string(),
                            "description": "bookies the check under way has not reached yet (asked again every pass); the check is not complete until they answer",
                        },
                    },
                },
            }),
        ),
    );
    // Logs (issue #23, docs/logs.md).
    let nullable_uint = json!({ "type": "integer", "format": "uint64", "minimum": 0, "nullable": true });
    m.insert(
        "Log".into(),
        object(
            &[
                "name",
                "epoch",
                "owner",
                "trim_before",
                "ledgers",
                "ensemble",
                "write_quorum",
                "ack_quorum",
                "rollover",
                "retention",
                "version",
                "created_at_ms",
            ],
            json!({
                "name": log_name(),
                "epoch": uint(),
                "owner": string(),
                "trim_before": uint(),
                "ledgers": array_of(object(&["ledger_id", "first_offset", "end_offset"], json!({
                    "ledger_id": uint(), "first_offset": uint(), "end_offset": nullable_uint,
                    "sealed_at_ms": uint(),
                }))),
                "ensemble": uint(), "write_quorum": uint(), "ack_quorum": uint(),
                "rollover": object(&["max_entries", "max_bytes", "max_age_ms"], json!({
                    "max_entries": uint(), "max_bytes": uint(), "max_age_ms": uint(),
                })),
                "retention": object(&["max_age_ms", "max_bytes"], json!({ "max_age_ms": uint(), "max_bytes": uint() })),
                "version": uint(),
                "created_at_ms": uint(),
                "principal": {
                    "type": "string", "nullable": true,
                    "description": "the HTTP principal the log was created for: only it may append, trim, take over, hold retention or delete through a gateway (null: none recorded)",
                },
            }),
        ),
    );
    m.insert(
        "LogList".into(),
        object(
            &["logs", "next"],
            json!({ "logs": array_of(log_name()), "next": { "type": "string", "nullable": true } }),
        ),
    );
    m.insert(
        "Cursor".into(),
        object(
            &["name", "position", "holds_retention", "version", "updated_at_ms"],
            json!({
                "name": log_name(), "position": uint(), "holds_retention": { "type": "boolean" },
                "version": uint(), "updated_at_ms": uint(),
            }),
        ),
    );
    m.insert("LogAppended".into(), object(&["offset"], json!({ "offset": uint() })));
    m.insert(
        "LogAppendedBatch".into(),
        object(
            &["first_offset", "last_offset", "offsets"],
            json!({ "first_offset": uint(), "last_offset": uint(), "offsets": array_of(uint()) }),
        ),
    );
    m.insert(
        "LogRecords".into(),
        object(
            &["records", "next"],
            json!({
                "records": array_of(object(&["offset", "time_ms", "data"], json!({
                    "offset": uint(), "data": { "type": "string", "format": "byte" },
                    "time_ms": {
                        "type": "integer", "format": "uint64", "minimum": 0,
                        "description": "when its writer took it, in milliseconds since the Unix epoch: never less than an earlier record's (0: written before records had a time)",
                    },
                    "producer_id": string(), "sequence": uint(),
                }))),
                "next": uint(),
            }),
        ),
    );
    for (name, example) in response_examples() {
        m[name]["example"] = example;
    }
    m
}

/// An example of each main answer (a test checks each against its schema).
fn response_examples() -> [(&'static str, Value); 10] {
    let ledger = json!({
        "ledger_id": 7, "state": "open", "ensemble": 3, "write_quorum": 3, "ack_quorum": 2,
        "ensembles": [{ "first_entry_id": 0, "bookies": ["bookie-1", "bookie-2", "bookie-3"] }],
        "last_entry_id": -1, "length": 0, "version": 1, "created_at_ms": 1_765_000_000_000u64,
        "metadata": { "app": "orders" },
    });
    [
        ("Error", json!({ "error": "NoSuchLog", "message": "no such log orders" })),
        ("Ledger", ledger),
        ("Appended", json!({ "entry_id": 12, "lac": 11 })),
        ("AppendedBatch", json!({ "first_entry_id": 12, "last_entry_id": 13 })),
        (
            "Entries",
            json!({ "entries": [{ "entry_id": 0, "data": "aGVsbG8=" }, { "entry_id": 1, "data": "d29ybGQ=" }] }),
        ),
        ("Lac", json!({ "lac": 11 })),
        (
            "Log",
            json!({
                "name": "orders", "epoch": 1, "owner": "gateway/1", "trim_before": 0,
                "ledgers": [{ "ledger_id": 7, "first_offset": 0, "end_offset": null }],
                "ensemble": 3, "write_quorum": 3, "ack_quorum": 2,
                "rollover": { "max_entries": 100_000, "max_bytes": 268_435_456, "max_age_ms": 3_600_000 },
                "retention": { "max_age_ms": 604_800_000, "max_bytes": 0 },
                "version": 2, "created_at_ms": 1_765_000_000_000u64, "principal": null,
            }),
        ),
        ("LogAppended", json!({ "offset": 42 })),
        (
            "LogRecords",
            json!({
                "records": [
                    { "offset": 42, "time_ms": 1_765_000_000_123u64, "data": "aGVsbG8=", "producer_id": "orders-service-1", "sequence": 7 },
                    { "offset": 43, "time_ms": 1_765_000_000_125u64, "data": "d29ybGQ=" },
                ],
                "next": 44,
            }),
        ),
        (
            "Cursor",
            json!({ "name": "billing", "position": 44, "holds_retention": true, "version": 3, "updated_at_ms": 1_765_000_000_200u64 }),
        ),
    ]
}

/// A log's name as the API takes it (quire_log::config::validate_name; `.`
/// and `..` are 400 too).
fn log_name() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._-]+$" })
}

/// A limit of a log's settings: 0 is none, null or absent the default.
fn nullable_uint(about: &str) -> Value {
    json!({
        "type": "integer", "format": "uint64", "minimum": 0, "maximum": u64::MAX, "nullable": true,
        "description": format!("{about} at most (0: no limit; null or absent: the default)"),
    })
}

/// A producer id of an idempotent append.
fn producer_id() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 64 })
}

fn request_body(kind: &str) -> Option<Value> {
    let mut body = request_schema(kind)?;
    if let Some(example) = request_example(kind) {
        body["content"]["application/json"]["example"] = example;
    }
    Some(body)
}

/// An example of each JSON request body (a test checks each against its
/// schema): what a generated client shows, and what a reader copies.
fn request_example(kind: &str) -> Option<Value> {
    Some(match kind {
        "batch" => json!({ "entries": ["aGVsbG8=", "d29ybGQ="] }),
        "create" => json!({ "ensemble": 3, "write_quorum": 3, "ack_quorum": 2, "metadata": { "app": "orders" } }),
        "log_create" => json!({
            "name": "orders", "ensemble": 3, "write_quorum": 3, "ack_quorum": 2,
            "rollover": { "max_entries": 100_000, "max_bytes": 268_435_456, "max_age_ms": 3_600_000 },
            "retention": { "max_age_ms": 604_800_000, "max_bytes": 0 },
        }),
        "log_batch" => {
            json!({ "records": ["aGVsbG8=", "d29ybGQ="], "producer_id": "orders-service-1", "sequence": 42 })
        }
        "cursor_put" => json!({ "from": "start", "holds_retention": true }),
        "cursor_ack" => json!({ "ack": 128 }),
        "log_trim" => json!({ "before": 1000 }),
        _ => return None,
    })
}

fn request_schema(kind: &str) -> Option<Value> {
    let body = |required: bool, media: &str, schema: Value| json!({ "required": required, "content": { media: { "schema": schema } } });
    match kind {
        // An entry may be empty (as in BookKeeper): no body is an empty entry.
        "raw" => Some(body(false, "application/octet-stream", json!({ "type": "string", "format": "binary" }))),
        "batch" => Some(body(
            true,
            "application/json",
            json!({
                "type": "object", "required": ["entries"], "additionalProperties": false,
                "properties": { "entries": {
                    "type": "array", "items": { "type": "string", "format": "byte" }, "minItems": 1, "maxItems": 10_000,
                } },
            }),
        )),
        "create" => Some(body(
            false,
            "application/json",
            json!({
                "type": "object", "additionalProperties": false,
                "properties": {
                    "ensemble": quorum("bookies the ledger is striped over (default 3)"),
                    "write_quorum": quorum("copies of each entry, at most ensemble (default 3)"),
                    "ack_quorum": quorum("copies acknowledged before an append is, at most write_quorum (default 2)"),
                    "metadata": {
                        "type": "object", "additionalProperties": string(), "nullable": true,
                        "description": "the ledger's own key-value pairs (not quire.*); null or absent: none",
                    },
                },
            }),
        )),
        "log_create" => Some(body(
            true,
            "application/json",
            json!({
                "type": "object", "required": ["name"], "additionalProperties": false,
                "properties": {
                    "name": log_name(),
                    "ensemble": quorum("bookies each ledger is striped over (default 3)"),
                    "write_quorum": quorum("copies of each record (default 3)"),
                    "ack_quorum": quorum("copies acknowledged before an append is (default 2)"),
                    "rollover": {
                        "type": "object", "additionalProperties": false, "nullable": true,
                        "description": "roll to a new ledger at the first limit reached (0: none; absent: the default)",
                        "properties": {
                            "max_entries": nullable_uint("records per ledger"),
                            "max_bytes": nullable_uint("payload bytes per ledger"),
                            "max_age_ms": nullable_uint("a ledger's age"),
                        },
                    },
                    "retention": {
                        "type": "object", "additionalProperties": false, "nullable": true,
                        "description": "trim whole ledgers past these (0 or absent: keep)",
                        "properties": {
                            "max_age_ms": nullable_uint("a whole ledger's age past its last record"),
                            "max_bytes": nullable_uint("bytes the log holds"),
                        },
                    },
                },
            }),
        )),
        "log_batch" => Some(body(
            true,
            "application/json",
            json!({
                "type": "object", "required": ["records"], "additionalProperties": false,
                "properties": {
                    "records": {
                        "type": "array", "items": { "type": "string", "format": "byte" }, "minItems": 1, "maxItems": 10_000,
                    },
                    "producer_id": producer_id(),
                    "sequence": uint(),
                    // (null is absent: an unconditional append)
                    "expected_offset": { "type": "integer", "format": "uint64", "minimum": 0, "nullable": true },
                },
            }),
        )),
        "cursor_put" => Some(body(
            false,
            "application/json",
            json!({
                "type": "object", "additionalProperties": false,
                "description": "from or position, not both (neither: start; a null position or holds_retention is absent); holds_retention only at creation",
                "properties": {
                    // An enum of the two names, not nullable: what a generator
                    // makes a plain enum of (null is 400, as any other value).
                    "from": { "type": "string", "enum": ["start", "end"] },
                    "position": { "type": "integer", "format": "uint64", "minimum": 0, "maximum": u64::MAX, "nullable": true },
                    "holds_retention": { "type": "boolean", "nullable": true },
                },
            }),
        )),
        "cursor_ack" => Some(body(
            true,
            "application/json",
            json!({
                "type": "object", "required": ["ack"], "additionalProperties": false,
                "properties": { "ack": uint() },
            }),
        )),
        "log_trim" => Some(body(
            true,
            "application/json",
            json!({
                "type": "object", "required": ["before"], "additionalProperties": false,
                "properties": { "before": uint() },
            }),
        )),
        _ => None,
    }
}

fn success(reply: &str) -> Value {
    match reply {
        "" => json!({ "description": "success, no body" }),
        "bytes" => {
            json!({ "description": "success", "content": { "application/octet-stream": { "schema": { "type": "string", "format": "binary" } } } })
        }
        "text" => json!({ "description": "success", "content": { "text/plain": { "schema": string() } } }),
        // A range (JSON), or with follow=true a stream of lines or events.
        "EntriesOrFollow" => json!({
            "description": "success: the range as JSON; with follow=true a stream, one JSON object a line \
                (an entry {entry_id, data}, a heartbeat {heartbeat, lac}, and last {closed, last_entry_id}, \
                {end, last_entry_id} at to, or {error, message} when the follow failed), or the same as server-sent \
                events (event: entry / closed / end / error; id: the entry id) with Accept: text/event-stream",
            "content": {
                "application/json": { "schema": reference("Entries") },
                "application/x-ndjson": { "schema": string() },
                "text/event-stream": { "schema": string() },
            },
        }),
        "LogRecordsOrFollow" => json!({
            "description": "success: the records as JSON (with follow=true, a long poll answered as soon as one is \
                committed); with follow=true and Accept: text/event-stream, server-sent events as records commit \
                (event: record, id: its offset; : heartbeat comments; event: error last when the follow failed), \
                resumed after a Last-Event-ID",
            "content": {
                "application/json": { "schema": reference("LogRecords") },
                "text/event-stream": { "schema": string() },
            },
        }),
        name => json!({ "description": "success", "content": { "application/json": { "schema": reference(name) } } }),
    }
}

/// The query parameters of a route.
fn query_params(method: &str, path: &str) -> Vec<Value> {
    let q = |name: &str, schema: Value, about: &str| json!({ "name": name, "in": "query", "required": false, "schema": schema, "description": about });
    match (method, path) {
        ("get", "/v1/ledgers/{id}/entries") => vec![
            q("from", uint(), "first entry (default 0)"),
            q("to", uint(), "last entry (default: the LAC; with follow, where the stream ends)"),
            q("follow", json!({ "type": "boolean" }), "stream entries as the LAC passes them until the ledger closes"),
        ],
        ("get", "/v1/ledgers") => vec![
            q("start_after", uint(), "ids after this one"),
            q("limit", json!({ "type": "integer", "minimum": 1, "maximum": 1000 }), "at most this many (default 100)"),
        ],
        ("get", "/v1/ledgers/{id}/lac") => vec![
            q(
                "after",
                json!({ "type": "integer", "format": "int64", "minimum": -1 }),
                "with timeout_ms, a long poll: answer once the LAC is past this",
            ),
            q(
                "timeout_ms",
                json!({ "type": "integer", "minimum": 0, "maximum": 60_000 }),
                "how long the long poll waits (default 0: answer at once)",
            ),
        ],
        ("get", "/v1/logs") => vec![
            q("start_after", log_name(), "names after this one"),
            q("limit", json!({ "type": "integer", "minimum": 1, "maximum": 1000 }), "at most this many (default 100)"),
        ],
        ("post", "/v1/logs/{name}/records") => vec![
            q("producer_id", producer_id(), "an idempotent append's producer (with sequence)"),
            q("sequence", uint(), "its sequence number: a retry answers the first offset"),
            q(
                "expected_offset",
                uint(),
                "written only if the log's next offset is this (412 with next_offset otherwise)",
            ),
        ],
        ("get", "/v1/logs/{name}/records") => vec![
            q("from", uint(), "first offset (default 0; below the trim point: 410)"),
            q("cursor", log_name(), "read from this cursor's position instead"),
            q(
                "from_time",
                uint(),
                "read from the first record whose time_ms is at or after this (ms since the Unix epoch) instead",
            ),
            q(
                "limit",
                json!({ "type": "integer", "minimum": 1, "maximum": 10_000 }),
                "at most this many (default 1000)",
            ),
            q(
                "follow",
                json!({ "type": "boolean" }),
                "wait for the next record when none is committed at from yet; with Accept: text/event-stream, stream every record as it commits",
            ),
            q(
                "wait_ms",
                json!({ "type": "integer", "minimum": 0, "maximum": 60_000 }),
                "how long a follow waits (default 30000)",
            ),
        ],
        _ => Vec::new(),
    }
}

/// The OpenAPI 3.0.3 document of `endpoints`.
pub fn document(endpoints: &[Endpoint]) -> Value {
    let mut paths = Map::new();
    for e in endpoints {
        let params: Vec<Value> = e
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|x| x.split('}').next()))
            .map(|name| {
                let schema = match name {
                    "bookie" => bookie_id(),
                    "name" | "cursor" => log_name(),
                    _ => uint(),
                };
                json!({ "name": name, "in": "path", "required": true, "schema": schema })
            })
            .chain(query_params(e.method, e.path))
            .collect();
        let mut responses = Map::new();
        for code in e.codes {
            let r = if *code == 412 {
                json!({
                    "description": "a conditional append met another next offset: nothing was written",
                    "content": { "application/json": { "schema": reference("PreconditionFailed") } },
                })
            } else if *code >= 400 {
                json!({ "description": "error", "content": { "application/json": { "schema": reference("Error") } } })
            } else {
                success(e.reply)
            };
            responses.insert(code.to_string(), r);
        }
        let mut op = json!({
            "operationId": e.operation_id,
            "tags": [tag(e.path)],
            "summary": e.summary,
            "parameters": params,
            "responses": responses,
        });
        if let Some(r) = request_body(e.request) {
            op["requestBody"] = r;
        }
        let item = paths.entry(e.path.to_string()).or_insert_with(|| json!({}));
        item[e.method] = op;
    }
    let tags: Vec<Value> = TAGS.iter().map(|(name, about)| json!({ "name": name, "description": about })).collect();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "quire HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Ledgers (BookKeeper's model: striped, replicated, append-only, closed once) and logs \
                (named, ordered records over a chain of ledgers, with idempotent, conditional and atomic appends, \
                durable cursors and trimming). Errors are {error, message} with a stable code (README.md, docs/logs.md).",
        },
        "tags": tags,
        "paths": paths,
        "components": { "schemas": schemas() },
    })
}

/// One tag per resource, in the order a reader meets them.
const TAGS: &[(&str, &str)] = &[
    ("logs", "Named logs: records at offsets over a chain of ledgers"),
    ("cursors", "A log's durable cursors: a consumer's acknowledged position"),
    ("ledgers", "Ledgers: striped, replicated entries up to the LastAddConfirmed"),
    ("bookies", "The storage nodes, and draining one"),
    ("cluster", "The cluster's state at a glance"),
    ("service", "This gateway: liveness, readiness, metrics"),
];

/// The resource a path is about: its tag.
fn tag(path: &str) -> &'static str {
    if path.contains("/cursors") {
        "cursors"
    } else if path.starts_with("/v1/logs") {
        "logs"
    } else if path.starts_with("/v1/ledgers") {
        "ledgers"
    } else if path.starts_with("/v1/bookies") {
        "bookies"
    } else if path.starts_with("/v1/cluster") {
        "cluster"
    } else {
        "service"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Python client's typed layer is generated from a copy of this
    /// document (clients/python/openapi.json): the copy is this document,
    /// or `make python-client` has not been run since a route changed.
    /// `QUIRE_BLESS=1` writes the copy (the make target does).
    #[test]
    fn the_python_clients_copy_of_the_document_is_current() {
        let want = serde_json::to_string_pretty(&document(crate::api::ENDPOINTS)).unwrap() + "\n";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/python/openapi.json");
        if std::env::var_os("QUIRE_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is not the gateway's document: run `make python-client` (it regenerates the client too)",
            path.display()
        );
    }

    /// Every `$ref` in the document names a schema it defines.
    #[test]
    fn every_reference_resolves() {
        let doc = document(crate::api::ENDPOINTS);
        let defined = doc["components"]["schemas"].as_object().unwrap().clone();
        fn walk(v: &Value, defined: &Map<String, Value>) {
            match v {
                Value::Object(o) => {
                    if let Some(r) = o.get("$ref").and_then(Value::as_str) {
                        let name = r.trim_start_matches("#/components/schemas/");
                        assert!(defined.contains_key(name), "unresolved {r}");
                    }
                    o.values().for_each(|x| walk(x, defined));
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, defined)),
                _ => {}
            }
        }
        walk(&doc, &defined);
    }
}
