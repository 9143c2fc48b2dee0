//! The gateway's HTTP API as goose requests: every call is named (one metric
//! per operation, not per ledger path), checks its status and parses its
//! reply, and a reply that is wrong is a failed request.

use crate::payload;
use crate::tally;
use base64::Engine;
use goose::goose::{GooseMethod, GooseRequest, GooseUser, TransactionError};
use goose::metrics::GooseRequestMetric;
use goose::prelude::TransactionResult;
use serde_json::Value;

type Res<T> = Result<T, Box<TransactionError>>;

/// Marks `request` failed with `why` and returns the error that ends the transaction.
fn fail(user: &mut GooseUser, request: &mut GooseRequestMetric, why: &str) -> Box<TransactionError> {
    tally::failure(why);
    let r: TransactionResult = user.set_failure(why, request, None, None);
    r.err().unwrap_or_else(|| Box::new(TransactionError::Custom(why.to_string())))
}

/// Marks `request` failed because what came back is wrong (bytes, ids, the
/// closed length): a broken guarantee, not a slow or refused request.
fn wrong(user: &mut GooseUser, request: &mut GooseRequestMetric, why: &str) -> Box<TransactionError> {
    tally::wrong();
    fail(user, request, why)
}

/// One request; the reply's bytes on a 2xx, a failed request otherwise.
async fn call(
    user: &mut GooseUser,
    method: GooseMethod,
    path: &str,
    name: &str,
    body: Option<(Vec<u8>, &'static str)>,
) -> Res<(GooseRequestMetric, Vec<u8>)> {
    let mut builder = user.get_request_builder(&method, path)?;
    if let Some((bytes, content_type)) = body {
        builder = builder.header("content-type", content_type).body(bytes);
    }
    let request = GooseRequest::builder().method(method).path(path).name(name).set_request_builder(builder).build();
    let mut goose = user.request(request).await?;
    let response = match goose.response {
        Ok(r) => r,
        Err(e) => return Err(fail(user, &mut goose.request, &format!("{name}: {e}"))),
    };
    let status = response.status();
    let bytes = match response.bytes().await {
        Ok(b) => b.to_vec(),
        Err(e) => return Err(fail(user, &mut goose.request, &format!("{name}: reading the reply: {e}"))),
    };
    if !status.is_success() {
        let why = format!("{name}: HTTP {}: {}", status.as_u16(), String::from_utf8_lossy(&bytes));
        return Err(fail(user, &mut goose.request, &why));
    }
    Ok((goose.request, bytes))
}

fn json(user: &mut GooseUser, request: &mut GooseRequestMetric, name: &str, bytes: &[u8]) -> Res<Value> {
    serde_json::from_slice(bytes).map_err(|e| fail(user, request, &format!("{name}: reply is not JSON: {e}")))
}

fn field_u64(user: &mut GooseUser, request: &mut GooseRequestMetric, v: &Value, key: &str) -> Res<u64> {
    match v.get(key).and_then(Value::as_u64) {
        Some(n) => Ok(n),
        None => Err(fail(user, request, &format!("reply has no unsigned {key:?}: {v}"))),
    }
}

/// Creates a ledger with the configured quorums; its id.
pub async fn create(user: &mut GooseUser) -> Res<u64> {
    let s = crate::settings::Settings::get();
    let body = serde_json::json!({
        "ensemble": s.ensemble, "write_quorum": s.write_quorum, "ack_quorum": s.ack_quorum,
        "metadata": {"application": "quire-loadtest"},
    });
    let (mut req, bytes) = call(
        user,
        GooseMethod::Post,
        "/v1/ledgers",
        "create",
        Some((body.to_string().into_bytes(), "application/json")),
    )
    .await?;
    let v = json(user, &mut req, "create", &bytes)?;
    field_u64(user, &mut req, &v, "ledger_id")
}

/// Appends entry `entry_id` of `ledger`; fails unless the gateway gave it that id.
pub async fn append(user: &mut GooseUser, ledger: u64, entry_id: u64) -> Res<()> {
    let len = crate::settings::Settings::get().entry_bytes;
    let path = format!("/v1/ledgers/{ledger}/entries");
    let body = payload::entry(ledger, entry_id, len);
    let (mut req, bytes) =
        call(user, GooseMethod::Post, &path, "append", Some((body, "application/octet-stream"))).await?;
    let v = json(user, &mut req, "append", &bytes)?;
    let got = field_u64(user, &mut req, &v, "entry_id")?;
    if got != entry_id {
        return Err(wrong(
            user,
            &mut req,
            &format!("append to ledger {ledger}: got entry id {got}, expected {entry_id}"),
        ));
    }
    tally::appended(1, len);
    Ok(())
}

/// Appends entries `first..first + count` of `ledger` in one request, under `name`.
pub async fn append_batch(user: &mut GooseUser, ledger: u64, first: u64, count: usize, name: &str) -> Res<()> {
    let len = crate::settings::Settings::get().entry_bytes;
    let b64 = base64::engine::general_purpose::STANDARD;
    let entries: Vec<String> = (0..count as u64).map(|i| b64.encode(payload::entry(ledger, first + i, len))).collect();
    let body = serde_json::json!({ "entries": entries }).to_string().into_bytes();
    let path = format!("/v1/ledgers/{ledger}/entries:batch");
    let (mut req, bytes) = call(user, GooseMethod::Post, &path, name, Some((body, "application/json"))).await?;
    let v = json(user, &mut req, name, &bytes)?;
    let got_first = field_u64(user, &mut req, &v, "first_entry_id")?;
    let got_last = field_u64(user, &mut req, &v, "last_entry_id")?;
    if got_first != first || got_last != first + count as u64 - 1 {
        let why = format!(
            "{name} to ledger {ledger}: got {got_first}..={got_last}, expected {first}..={}",
            first + count as u64 - 1
        );
        return Err(wrong(user, &mut req, &why));
    }
    tally::appended(count as u64, len);
    Ok(())
}

/// Long-polls the LAC of `ledger` until it passes `after` or the timeout; the LAC (-1: empty).
pub async fn lac_after(user: &mut GooseUser, ledger: u64, after: i64) -> Res<i64> {
    let timeout = crate::settings::Settings::get().poll_timeout_ms;
    let path = format!("/v1/ledgers/{ledger}/lac?after={after}&timeout_ms={timeout}");
    let (mut req, bytes) = call(user, GooseMethod::Get, &path, "lac_poll", None).await?;
    let v = json(user, &mut req, "lac_poll", &bytes)?;
    match v.get("lac").and_then(Value::as_i64) {
        Some(n) => Ok(n),
        None => Err(fail(user, &mut req, &format!("lac_poll: reply has no \"lac\": {v}"))),
    }
}

/// Reads entries `from..=to` of `ledger` and checks every one; how many came back.
/// The gateway stops at the LAC, so fewer than asked is not an error, but a
/// gap, a reordering or a wrong byte is.
pub async fn read_range(user: &mut GooseUser, ledger: u64, from: u64, to: u64) -> Res<u64> {
    let len = crate::settings::Settings::get().entry_bytes;
    let path = format!("/v1/ledgers/{ledger}/entries?from={from}&to={to}");
    let (mut req, bytes) = call(user, GooseMethod::Get, &path, "read_range", None).await?;
    let v = json(user, &mut req, "read_range", &bytes)?;
    let Some(entries) = v.get("entries").and_then(Value::as_array) else {
        return Err(fail(user, &mut req, "read_range: reply has no \"entries\" array"));
    };
    let mut n = 0u64;
    for e in entries {
        if let Err(why) = check_entry(ledger, from + n, len, e) {
            return Err(wrong(user, &mut req, &format!("read_range: {why}")));
        }
        n += 1;
    }
    if from + n > to + 1 {
        return Err(wrong(user, &mut req, &format!("read_range: {n} entries for {from}..={to}")));
    }
    tally::read(n, len);
    Ok(n)
}

/// An entry of a reply (`{"entry_id":..,"data":"<base64>"}`) is `expected`
/// with the bytes its writer gave it.
fn check_entry(ledger: u64, expected: u64, len: usize, e: &Value) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let id = e.get("entry_id").and_then(Value::as_u64);
    let data = e.get("data").and_then(Value::as_str).and_then(|d| b64.decode(d).ok());
    match (id, data) {
        (Some(id), _) if id != expected => Err(format!("ledger {ledger}: got entry {id} where {expected} belongs")),
        (Some(_), Some(data)) => payload::check(ledger, expected, len, &data),
        _ => Err(format!("ledger {ledger}: malformed entry in a reply: {e}")),
    }
}

/// Follows `ledger` from `from` to `to` (`entries?follow=true`, NDJSON): the
/// answer ends once entry `to` has come (its last line `{"end":true,..}`),
/// or the ledger closed first (`{"closed":true,..}`).
/// Every entry is checked, in order; heartbeats are skipped. How many came.
pub async fn follow(user: &mut GooseUser, ledger: u64, from: u64, to: u64) -> Res<u64> {
    let len = crate::settings::Settings::get().entry_bytes;
    let path = format!("/v1/ledgers/{ledger}/entries?from={from}&to={to}&follow=true");
    let (mut req, bytes) = call(user, GooseMethod::Get, &path, "follow", None).await?;
    let mut n = 0u64;
    let mut ended = false;
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => return Err(fail(user, &mut req, &format!("follow: a line is not JSON: {e}"))),
        };
        if v.get("heartbeat").is_some() {
            continue;
        }
        // The last line: `to` reached ("end"), or the ledger closed first.
        if v.get("end").is_some() || v.get("closed").is_some() {
            ended = true;
            continue;
        }
        if let Err(why) = check_entry(ledger, from + n, len, &v) {
            return Err(wrong(user, &mut req, &format!("follow: {why}")));
        }
        n += 1;
    }
    if !ended || from + n > to + 1 {
        return Err(wrong(
            user,
            &mut req,
            &format!("follow: {n} entries for {from}..={to}, closing line seen: {ended}"),
        ));
    }
    tally::read(n, len);
    Ok(n)
}

/// Reads entry `entry_id` of `ledger` and checks it.
pub async fn read_one(user: &mut GooseUser, ledger: u64, entry_id: u64) -> Res<()> {
    let len = crate::settings::Settings::get().entry_bytes;
    let path = format!("/v1/ledgers/{ledger}/entries/{entry_id}");
    let (mut req, bytes) = call(user, GooseMethod::Get, &path, "read_one", None).await?;
    if let Err(why) = payload::check(ledger, entry_id, len, &bytes) {
        return Err(wrong(user, &mut req, &format!("read_one: {why}")));
    }
    tally::read(1, len);
    Ok(())
}

/// Closes `ledger`; with `last`, fails unless the closed ledger ends there (-1: empty).
pub async fn close(user: &mut GooseUser, ledger: u64, last: Option<i64>) -> Res<()> {
    let path = format!("/v1/ledgers/{ledger}/close");
    let (mut req, bytes) = call(user, GooseMethod::Post, &path, "close", None).await?;
    let v = json(user, &mut req, "close", &bytes)?;
    let got = v.get("last_entry_id").and_then(Value::as_i64);
    if last.is_some() && got != last {
        return Err(wrong(
            user,
            &mut req,
            &format!("close ledger {ledger}: last entry {got:?}, acknowledged up to {last:?}"),
        ));
    }
    Ok(())
}

/// Deletes `ledger`.
pub async fn delete(user: &mut GooseUser, ledger: u64) -> Res<()> {
    let path = format!("/v1/ledgers/{ledger}");
    call(user, GooseMethod::Delete, &path, "delete", None).await.map(|_| ())
}

// ---- logs (issue #23) -----------------------------------------------------

/// Creates log `name` (rolled every `rollover` records); its first ledger's id.
pub async fn create_log(user: &mut GooseUser, name: &str, rollover: u64) -> Res<()> {
    let s = crate::settings::Settings::get();
    let body = serde_json::json!({
        "name": name, "ensemble": s.ensemble, "write_quorum": s.write_quorum, "ack_quorum": s.ack_quorum,
        "rollover": { "max_entries": rollover },
    });
    let (mut req, bytes) = call(
        user,
        GooseMethod::Post,
        "/v1/logs",
        "log_create",
        Some((body.to_string().into_bytes(), "application/json")),
    )
    .await?;
    let v = json(user, &mut req, "log_create", &bytes)?;
    if v["name"] != name {
        return Err(wrong(user, &mut req, &format!("log create answered {v}")));
    }
    Ok(())
}

/// Appends record `offset` of log `name` (its payload names `key` and the
/// offset) idempotently as producer `name` with sequence `offset`; fails
/// unless the gateway gave it that offset (the user is the log's one
/// writer: offsets are dense). A retry answers the same offset.
pub async fn log_append(user: &mut GooseUser, name: &str, key: u64, offset: u64) -> Res<()> {
    let len = crate::settings::Settings::get().entry_bytes;
    let path = format!("/v1/logs/{name}/records?producer_id={name}&sequence={offset}");
    let body = payload::entry(key, offset, len);
    let (mut req, bytes) =
        call(user, GooseMethod::Post, &path, "log_append", Some((body, "application/octet-stream"))).await?;
    let v = json(user, &mut req, "log_append", &bytes)?;
    let got = field_u64(user, &mut req, &v, "offset")?;
    if got != offset {
        return Err(wrong(user, &mut req, &format!("append to log {name}: got offset {got}, expected {offset}")));
    }
    tally::appended(1, len);
    Ok(())
}

/// Reads records `from..` of log `name` (at most `limit`, following for up
/// to a second when none is committed yet), checking each one's bytes; how
/// many came.
pub async fn log_read(user: &mut GooseUser, name: &str, key: u64, from: u64, limit: u64) -> Res<u64> {
    let len = crate::settings::Settings::get().entry_bytes;
    let path = format!("/v1/logs/{name}/records?from={from}&limit={limit}&follow=true&wait_ms=1000");
    let (mut req, bytes) = call(user, GooseMethod::Get, &path, "log_read", None).await?;
    let v = json(user, &mut req, "log_read", &bytes)?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let records = v["records"].as_array().cloned().unwrap_or_default();
    for (i, r) in records.iter().enumerate() {
        let expected = from + i as u64;
        let offset = r["offset"].as_u64();
        let data = r["data"].as_str().and_then(|d| b64.decode(d).ok());
        let verdict = match (offset, data) {
            (Some(o), _) if o != expected => Err(format!("log {name}: record {i} has offset {o}, expected {expected}")),
            (Some(_), Some(data)) => payload::check(key, expected, len, &data),
            _ => Err(format!("log {name}: a record without an offset or base64 data: {r}")),
        };
        if let Err(why) = verdict {
            return Err(wrong(user, &mut req, &why));
        }
    }
    tally::read(records.len() as u64, len);
    Ok(records.len() as u64)
}

/// Deletes log `name`.
pub async fn delete_log(user: &mut GooseUser, name: &str) -> Res<()> {
    call(user, GooseMethod::Delete, &format!("/v1/logs/{name}"), "log_delete", None).await?;
    Ok(())
}
