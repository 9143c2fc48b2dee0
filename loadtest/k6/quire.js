// The goose scenarios of loadtest/goose, for k6 users:
//
//   k6 run -e BASE=http://127.0.0.1:8080 -e SCENARIO=appendheavy -e VUS=16 -e DURATION=30s loadtest/k6/quire.js
//
// SCENARIO: appendheavy | tailread | catchup | mixed | logs. Knobs as in goose:
// ENTRY_BYTES (1024), ENSEMBLE/WRITE_QUORUM/ACK_QUORUM (3/3/2), APPEND_BATCH (1),
// TAIL_BATCH (10), CATCHUP_ENTRIES (2000), READ_RANGE (100), LEDGER_ENTRIES (1000),
// KEEP_LEDGERS (0). k6 prints p50/p90/p99/p99.9 per
// operation (the `op` tag) and the entries and bytes appended and read; a read
// that returns bytes that were never written fails the `wrong_replies` threshold.
// Every VU is one user with its own ledger (tailread follows its own writes:
// k6 VUs share no state).
import http from 'k6/http';
import encoding from 'k6/encoding';
import { Counter } from 'k6/metrics';

const BASE = __ENV.BASE || 'http://127.0.0.1:8080';
const SCENARIO = __ENV.SCENARIO || 'appendheavy';
const num = (name, dflt) => (__ENV[name] === undefined ? dflt : Number(__ENV[name]));
const ENTRY_BYTES = Math.max(16, num('ENTRY_BYTES', 1024));
const QUORUMS = { ensemble: num('ENSEMBLE', 3), write_quorum: num('WRITE_QUORUM', 3), ack_quorum: num('ACK_QUORUM', 2) };
const APPEND_BATCH = Math.max(1, num('APPEND_BATCH', 1));
const TAIL_BATCH = Math.max(1, num('TAIL_BATCH', 10));
const CATCHUP_ENTRIES = Math.max(1, num('CATCHUP_ENTRIES', 2000));
const READ_RANGE = Math.max(1, num('READ_RANGE', 100));
const LEDGER_ENTRIES = Math.max(1, num('LEDGER_ENTRIES', 1000));
const KEEP = num('KEEP_LEDGERS', 0) === 1;

if (!['appendheavy', 'tailread', 'catchup', 'mixed', 'logs'].includes(SCENARIO)) {
  throw new Error(`unknown SCENARIO ${SCENARIO}`);
}

const OPS = ['create', 'append', 'append_batch', 'fill_batch', 'lac_poll', 'follow', 'read_range', 'read_one', 'close', 'delete',
  'log_create', 'log_append', 'log_read', 'log_delete'];
const thresholds = { wrong_replies: ['count==0'] };
// A threshold on each operation's sub-metric makes k6 keep and print it.
for (const op of OPS) thresholds[`http_req_duration{op:${op}}`] = ['max>=0'];

export const options = {
  vus: num('VUS', 8),
  duration: __ENV.DURATION || '30s',
  summaryTrendStats: ['avg', 'p(50)', 'p(90)', 'p(99)', 'p(99.9)', 'max'],
  thresholds,
};

const appendedEntries = new Counter('appended_entries');
const appendedBytes = new Counter('appended_bytes');
const readEntries = new Counter('read_entries');
const readBytes = new Counter('read_bytes');
const wrongReplies = new Counter('wrong_replies');

// Entry bytes as goose writes them: ledger id (8 LE) | entry id (8 LE) | filler.
function entry(ledger, id) {
  const buf = new Uint8Array(ENTRY_BYTES);
  let l = ledger, e = id;
  for (let i = 0; i < 8; i++) { buf[i] = l % 256; l = Math.floor(l / 256); }
  for (let i = 0; i < 8; i++) { buf[8 + i] = e % 256; e = Math.floor(e / 256); }
  const seed = (ledger * 31 + id) % 251;
  for (let i = 16; i < ENTRY_BYTES; i++) buf[i] = (seed + (i - 16)) % 256;
  return buf;
}

function sameBytes(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function ok(res, op) {
  if (res.status < 200 || res.status > 299) {
    console.warn(`${op}: HTTP ${res.status}: ${res.body}`);
    return false;
  }
  return true;
}

function wrong(why) {
  wrongReplies.add(1);
  console.error(why);
}

function post(path, body, op, contentType) {
  return http.post(`${BASE}${path}`, body, { headers: { 'content-type': contentType }, tags: { op } });
}

function create() {
  const res = post('/v1/ledgers', JSON.stringify(Object.assign({ metadata: { application: 'quire-loadtest' } }, QUORUMS)), 'create', 'application/json');
  return ok(res, 'create') ? res.json('ledger_id') : null;
}

function append(ledger, id) {
  const res = post(`/v1/ledgers/${ledger}/entries`, entry(ledger, id).buffer, 'append', 'application/octet-stream');
  if (!ok(res, 'append')) return false;
  if (res.json('entry_id') !== id) { wrong(`append to ${ledger}: entry id ${res.json('entry_id')}, expected ${id}`); return false; }
  appendedEntries.add(1); appendedBytes.add(ENTRY_BYTES);
  return true;
}

function appendBatch(ledger, first, count, op) {
  const entries = [];
  for (let i = 0; i < count; i++) entries.push(encoding.b64encode(entry(ledger, first + i).buffer, 'std'));
  const res = post(`/v1/ledgers/${ledger}/entries:batch`, JSON.stringify({ entries }), op, 'application/json');
  if (!ok(res, op)) return false;
  if (res.json('first_entry_id') !== first || res.json('last_entry_id') !== first + count - 1) {
    wrong(`${op} to ${ledger}: ${res.json('first_entry_id')}..=${res.json('last_entry_id')}, expected ${first}..=${first + count - 1}`);
    return false;
  }
  appendedEntries.add(count); appendedBytes.add(count * ENTRY_BYTES);
  return true;
}

// Reads from..=to and checks every entry; how many came back (null on error).
function readRange(ledger, from, to) {
  const res = http.get(`${BASE}/v1/ledgers/${ledger}/entries?from=${from}&to=${to}`, { tags: { op: 'read_range' } });
  if (!ok(res, 'read_range')) return null;
  const entries = res.json('entries');
  for (let n = 0; n < entries.length; n++) {
    const e = entries[n];
    if (e.entry_id !== from + n) { wrong(`ledger ${ledger}: entry ${e.entry_id} where ${from + n} belongs`); return null; }
    const got = new Uint8Array(encoding.b64decode(e.data, 'std'));
    if (!sameBytes(got, entry(ledger, from + n))) { wrong(`ledger ${ledger} entry ${from + n}: bytes differ`); return null; }
  }
  readEntries.add(entries.length); readBytes.add(entries.length * ENTRY_BYTES);
  return entries.length;
}

// Follows from..=to (entries?follow=true, NDJSON: the answer ends once entry
// `to` came, or the ledger closed) and checks every entry; how many came.
function follow(ledger, from, to) {
  const res = http.get(`${BASE}/v1/ledgers/${ledger}/entries?from=${from}&to=${to}&follow=true`, { tags: { op: 'follow' } });
  if (!ok(res, 'follow')) return null;
  let n = 0;
  let closed = false;
  for (const line of res.body.split('\n')) {
    if (line === '') continue;
    const e = JSON.parse(line);
    if (e.heartbeat) continue;
    if (e.end || e.closed) { closed = true; continue; }
    if (e.entry_id !== from + n) { wrong(`ledger ${ledger}: entry ${e.entry_id} where ${from + n} belongs`); return null; }
    const got = new Uint8Array(encoding.b64decode(e.data, 'std'));
    if (!sameBytes(got, entry(ledger, from + n))) { wrong(`ledger ${ledger} entry ${from + n}: bytes differ`); return null; }
    n++;
  }
  if (!closed) { wrong(`ledger ${ledger}: a follow of ${from}..=${to} ended without its closing line`); return null; }
  readEntries.add(n); readBytes.add(n * ENTRY_BYTES);
  return n;
}

function readOne(ledger, id) {
  const res = http.get(`${BASE}/v1/ledgers/${ledger}/entries/${id}`, { tags: { op: 'read_one' }, responseType: 'binary' });
  if (!ok(res, 'read_one')) return;
  if (!sameBytes(new Uint8Array(res.body), entry(ledger, id))) { wrong(`ledger ${ledger} entry ${id}: bytes differ`); return; }
  readEntries.add(1); readBytes.add(ENTRY_BYTES);
}

function close(ledger, last) {
  const res = http.post(`${BASE}/v1/ledgers/${ledger}/close`, null, { tags: { op: 'close' } });
  if (ok(res, 'close') && last !== undefined && res.json('last_entry_id') !== last) {
    wrong(`close ${ledger}: last entry ${res.json('last_entry_id')}, acknowledged up to ${last}`);
  }
}

function remove(ledger) {
  if (!KEEP) http.del(`${BASE}/v1/ledgers/${ledger}`, null, { tags: { op: 'delete' } });
}

// Per-VU state (each VU runs its own copy of this module).
let ledger = null, next = 0, readNext = 0, last = -1;
const closed = [];

function ensureLedger() {
  if (ledger === null) { ledger = create(); next = 0; readNext = 0; }
  return ledger;
}

// A failed append may or may not have landed: drop the ledger rather than guess.
function abandon() {
  if (ledger !== null) close(ledger);
  ledger = null;
}

// A log per VU (issue #23): this VU is its one writer, so offsets are dense;
// each append is idempotent (producer = the log, sequence = the offset), so
// a retry after a failure answers the offset it got rather than a second copy.
let log = null, logKey = 0;
const LOG_ROLLOVER = 200;

function logCreate() {
  logKey = Math.floor(Math.random() * 2 ** 40);
  const name = `k6-${__VU}-${logKey.toString(16)}`;
  const body = JSON.stringify(Object.assign({ name, rollover: { max_entries: LOG_ROLLOVER } }, QUORUMS));
  const res = post('/v1/logs', body, 'log_create', 'application/json');
  return ok(res, 'log_create') ? name : null;
}

function logAppend(name, offset) {
  const path = `/v1/logs/${name}/records?producer_id=${name}&sequence=${offset}`;
  const res = post(path, entry(logKey, offset).buffer, 'log_append', 'application/octet-stream');
  if (!ok(res, 'log_append')) return false;
  if (res.json('offset') !== offset) { wrong(`append to log ${name}: offset ${res.json('offset')}, expected ${offset}`); return false; }
  appendedEntries.add(1); appendedBytes.add(ENTRY_BYTES);
  return true;
}

function logRead(name, from) {
  const res = http.get(`${BASE}/v1/logs/${name}/records?from=${from}&limit=100&follow=true&wait_ms=1000`, { tags: { op: 'log_read' } });
  if (!ok(res, 'log_read')) return null;
  const records = res.json('records');
  for (let i = 0; i < records.length; i++) {
    const r = records[i];
    if (r.offset !== from + i) { wrong(`log ${name}: record ${i} at offset ${r.offset}, expected ${from + i}`); return null; }
    const got = new Uint8Array(encoding.b64decode(r.data, 'std'));
    if (!sameBytes(got, entry(logKey, from + i))) { wrong(`log ${name} offset ${from + i}: bytes differ`); return null; }
  }
  readEntries.add(records.length); readBytes.add(records.length * ENTRY_BYTES);
  return records.length;
}

const scenarios = {
  logs() {
    if (log === null) { log = logCreate(); next = 0; readNext = 0; if (log === null) return; }
    for (let i = 0; i < 4; i++) {
      if (!logAppend(log, next)) return; // asked again at the next iteration, idempotently
      next += 1;
    }
    const n = logRead(log, readNext);
    if (n !== null) readNext += n;
  },
  appendheavy() {
    if (ensureLedger() === null) return;
    const okay = APPEND_BATCH === 1 ? append(ledger, next) : appendBatch(ledger, next, APPEND_BATCH, 'append_batch');
    if (okay) next += APPEND_BATCH; else abandon();
  },
  tailread() {
    if (ensureLedger() === null) return;
    if (!appendBatch(ledger, next, TAIL_BATCH, 'append_batch')) { abandon(); return; }
    next += TAIL_BATCH;
    // The batch just written, followed: the answer ends with its last entry.
    const n = follow(ledger, readNext, readNext + TAIL_BATCH - 1);
    if (n !== null) readNext += n;
  },
  catchup() {
    if (ledger === null) {
      const l = create();
      if (l === null) return;
      for (let i = 0; i < CATCHUP_ENTRIES; i += 100) {
        if (!appendBatch(l, i, Math.min(100, CATCHUP_ENTRIES - i), 'fill_batch')) return;
      }
      close(l, CATCHUP_ENTRIES - 1);
      ledger = l; last = CATCHUP_ENTRIES - 1; readNext = 0;
    }
    const to = Math.min(last, readNext + READ_RANGE - 1);
    const n = readRange(ledger, readNext, to);
    if (n === null) return;
    if (n !== to - readNext + 1) { wrong(`closed ledger ${ledger}: asked ${readNext}..=${to}, got ${n}`); return; }
    readNext = to === last ? 0 : to + 1;
  },
  mixed() {
    for (let i = 0; i < 8; i++) {
      if (ensureLedger() === null) return;
      if (append(ledger, next)) next += 1; else { abandon(); return; }
    }
    for (let i = 0; i < 2; i++) readOne(ledger, Math.floor(Math.random() * next));
    if (next >= LEDGER_ENTRIES) {
      close(ledger, next - 1);
      closed.push(ledger);
      ledger = null;
      while (closed.length > 2) remove(closed.shift());
    }
  },
};

export default function () {
  scenarios[SCENARIO]();
}

export function handleSummary(data) {
  const m = data.metrics;
  const secs = data.state.testRunDurationMs / 1000;
  const v = (name, key) => (m[name] ? m[name].values[key] : 0);
  const lines = [`=== quire load summary (k6, ${SCENARIO}, ${options.vus} VUs, ${secs.toFixed(1)} s) ===`];
  lines.push(`http_req_duration ms: p50 ${v('http_req_duration', 'p(50)').toFixed(2)} p90 ${v('http_req_duration', 'p(90)').toFixed(2)} p99 ${v('http_req_duration', 'p(99)').toFixed(2)} p99.9 ${v('http_req_duration', 'p(99.9)').toFixed(2)} max ${v('http_req_duration', 'max').toFixed(2)}`);
  for (const op of OPS) {
    const t = m[`http_req_duration{op:${op}}`];
    if (!t || !t.values || !t.values['max']) continue;
    const f = (k) => t.values[k].toFixed(2);
    lines.push(`  ${op.padEnd(12)} ms: p50 ${f('p(50)')} p90 ${f('p(90)')} p99 ${f('p(99)')} p99.9 ${f('p(99.9)')} max ${f('max')}`);
  }
  lines.push(`requests: ${v('http_reqs', 'count')} (${v('http_reqs', 'rate').toFixed(1)}/s), failed ${(100 * v('http_req_failed', 'rate')).toFixed(2)} %`);
  lines.push(`appended: ${v('appended_entries', 'count')} entries, ${(v('appended_bytes', 'count') / secs / 1e6).toFixed(2)} MB/s | read: ${v('read_entries', 'count')} entries, ${(v('read_bytes', 'count') / secs / 1e6).toFixed(2)} MB/s`);
  lines.push(`wrong replies: ${v('wrong_replies', 'count')}`);
  return { stdout: lines.join('\n') + '\n', 'k6-summary.json': JSON.stringify(data, null, 2) };
}
