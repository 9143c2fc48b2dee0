#!/usr/bin/env python3
"""Writers and the checker of the ext4 power-loss test (ext4-powerloss.sh).

write: WRITERS threads create ledgers over the gateway's HTTP API, append
entries and close some, and two more each append records to a log of its
own (idempotent: producer id and sequence); every acknowledgement (a 2xx
answer) is recorded in ACKS as one JSON line. After SECS seconds, with the writers still running,
CUT (a command) cuts the power; the writers then stop.

check: every acknowledged creation, entry and close must be there after the
restart: each ledger exists; one whose close was acknowledged is closed at
the same last entry; an open one is recovered (fenced and closed at its true
tail) and its tail is at or past its last acknowledged entry; every
acknowledged entry reads back with its bytes; each log is taken over (one
more append through the new gateway, which seals the old writer's ledger)
and every acknowledged record reads back at its offset. Exit status 1 on
any loss, or when too little was acknowledged to check (floors: 10 ledgers,
1 000 entries, a close, 2 logs, 100 log records; not with --expect-loss).
"""

import argparse
import base64
import json
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def call(method, url, data=None, timeout=10):
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception as e:  # connection refused, timeout: no answer
        return None, str(e).encode()


class Acks:
    def __init__(self, path):
        self.f = open(path, "a")
        self.lock = threading.Lock()
        self.count = 0

    def add(self, rec):
        with self.lock:
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()
            self.count += 1


def payload(w, ledger, k):
    return (f"writer {w} ledger {ledger} append {k} " * (3 + k % 7)).encode()


def writer(w, base, acks, stop, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        status, body = call("POST", f"{base}/v1/ledgers")
        if status != 201:
            time.sleep(0.05)
            continue
        lid = json.loads(body)["ledger_id"]
        acks.add({"create": lid})
        closed = True
        for k in range(rng.randint(20, 200)):
            if stop.is_set():
                closed = False
                break
            data = payload(w, lid, k)
            status, body = call("POST", f"{base}/v1/ledgers/{lid}/entries", data)
            if status != 200:
                closed = False
                break
            acks.add({"ledger": lid, "entry": json.loads(body)["entry_id"], "payload": data.decode()})
        if closed and rng.random() < 0.5:
            status, body = call("POST", f"{base}/v1/ledgers/{lid}/close")
            if status == 200:
                acks.add({"close": lid, "last_entry_id": json.loads(body)["last_entry_id"]})


def log_writer(w, base, acks, stop):
    name = f"ext4-log-{w}"
    status, body = call("POST", f"{base}/v1/logs", json.dumps({"name": name}).encode())
    if status not in (201, 409):
        print(f"log {name} not created: {status} {body[:200]!r}", flush=True)
        return
    acks.add({"log_created": name})
    k = 0
    while not stop.is_set():
        k += 1
        data = f"log {name} sequence {k} ".encode() * (1 + k % 5)
        url = f"{base}/v1/logs/{name}/records?producer_id=ext4-{w}&sequence={k}"
        status, body = call("POST", url, data)
        if status == 200:
            acks.add({"log": name, "offset": json.loads(body)["offset"], "payload": data.decode()})
        else:
            time.sleep(0.05)


def write(args):
    base = f"http://{args.http}"
    acks = Acks(args.acks)
    stop = threading.Event()
    threads = [
        threading.Thread(target=writer, args=(w, base, acks, stop, args.seed + w), daemon=True)
        for w in range(args.writers)
    ]
    threads += [
        threading.Thread(target=log_writer, args=(w, base, acks, stop), daemon=True) for w in range(2)
    ]
    for t in threads:
        t.start()
    time.sleep(args.secs)
    before = acks.count
    print(f"{before} acknowledgements in {args.secs} s; cutting the power: {args.cut}", flush=True)
    subprocess.run(args.cut, shell=True, check=True)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    print(f"{acks.count} acknowledgements in all ({acks.count - before} after the cut began)", flush=True)


def check(args):
    base = f"http://{args.http}"
    created, entries, closes, logs = [], {}, {}, {}
    with open(args.acks) as f:
        for line in f:
            r = json.loads(line)
            if "create" in r:
                created.append(r["create"])
            elif "entry" in r:
                entries.setdefault(r["ledger"], {})[r["entry"]] = r["payload"].encode()
            elif "close" in r:
                closes[r["close"]] = r["last_entry_id"]
            elif "log_created" in r:
                logs.setdefault(r["log_created"], {})
            elif "log" in r:
                logs.setdefault(r["log"], {})[r["offset"]] = r["payload"].encode()
    lost = []
    read = 0
    for lid in created:
        status, body = call("GET", f"{base}/v1/ledgers/{lid}")
        if status != 200:
            lost.append(f"ledger {lid}: its creation was acknowledged, now {status} {body[:200]!r}")
            continue
        meta = json.loads(body)
        if lid in closes:
            if meta.get("state") != "closed" or meta.get("last_entry_id") != closes[lid]:
                lost.append(f"ledger {lid}: closed at {closes[lid]} (acknowledged), now {meta}")
                continue
            last = closes[lid]
        elif meta.get("state") == "closed":
            last = meta.get("last_entry_id")
        else:
            status, body = call("POST", f"{base}/v1/ledgers/{lid}/recover", timeout=60)
            if status != 200:
                lost.append(f"ledger {lid}: recovery failed: {status} {body[:200]!r}")
                continue
            last = json.loads(body)["last_entry_id"]
        for eid, want in sorted(entries.get(lid, {}).items()):
            if last is None or eid > last:
                lost.append(f"ledger {lid}: entry {eid} was acknowledged, the ledger ends at {last}")
                continue
            status, got = call("GET", f"{base}/v1/ledgers/{lid}/entries/{eid}")
            read += 1
            if status != 200 or got != want:
                lost.append(f"ledger {lid} entry {eid}: acknowledged, now {status} {got[:80]!r}")
    n_records = 0
    for name, records in sorted(logs.items()):
        n_records += len(records)
        # A takeover through the new gateway seals the old writer's ledger:
        # every record acknowledged before the cut is below the end then.
        status, body = call("POST", f"{base}/v1/logs/{name}/records?producer_id=ext4-check&sequence=1", b"after")
        if status != 200:
            lost.append(f"log {name}: no append after the restart: {status} {body[:200]!r}")
            continue
        got, at = {}, 0
        while True:
            status, body = call("GET", f"{base}/v1/logs/{name}/records?from={at}", timeout=30)
            if status != 200:
                lost.append(f"log {name}: read from {at}: {status} {body[:200]!r}")
                break
            page = json.loads(body)
            for rec in page["records"]:
                got[rec["offset"]] = base64.b64decode(rec["data"])
            if not page["records"] or page["next"] <= at:
                break
            at = page["next"]
        for off, want in sorted(records.items()):
            if got.get(off) != want:
                lost.append(f"log {name} offset {off}: acknowledged, now {got.get(off, b'absent')[:80]!r}")
    n_entries = sum(len(e) for e in entries.values())
    print(
        f"checked {len(created)} ledgers, {n_entries} acknowledged entries ({read} read back), "
        f"{len(closes)} acknowledged closes, {len(logs)} logs with {n_records} acknowledged records"
    )
    # A check of almost nothing proves nothing: a run whose writers were
    # hardly acknowledged (a gateway that never served, say) fails.
    floors = {"ledgers": (len(created), 10), "entries": (n_entries, 1000), "closes": (len(closes), 1),
              "logs": (len(logs), 2), "log records": (n_records, 100)}
    short = [f"{k}: {got} < {want}" for k, (got, want) in floors.items() if got < want]
    if short and not args.expect_loss:
        print(f"too little was acknowledged to check: {', '.join(short)}")
        sys.exit(1)
    for l in lost[:20]:
        print(f"LOST: {l}")
    if lost:
        print(f"{len(lost)} acknowledged operations lost")
        sys.exit(1)
    print("every acknowledged creation, entry, close and log record survived the power cut")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["write", "check"])
    p.add_argument("--http", required=True)
    p.add_argument("--acks", required=True)
    p.add_argument("--secs", type=float, default=20)
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cut", default="true")
    p.add_argument("--expect-loss", action="store_true", help="the negative control: no floors")
    args = p.parse_args()
    write(args) if args.mode == "write" else check(args)


if __name__ == "__main__":
    main()
