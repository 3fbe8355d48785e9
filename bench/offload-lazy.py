#!/usr/bin/env python3
"""Offload with a lazy restore: a server-shim database of SIZE MiB (one table of
point-selectable rows, built with SQLite directly), offloaded to a local directory store (or,
with BENCH_STORE=s3, to s3s-fs on loopback, read back through the relay's socket), then:

  wake        paused -> login OK from the client, the database still in the store
  first       the first point select on that connection (fetches the chunks it touches)
  hydrating   point selects on random ids, one client, from then until the relay says the
              data is local (server-shim fills it in behind at its default 64 MiB/s)
  warm        the same number of point selects right after, on the now ordinary local file
              (the reference, in the same run)
  wake local  paused -> login OK with the same data local (woken before the offload is due)
  disk        bytes left under the data directory (and its marker) while offloaded
  re-offload  chunks uploaded after one row changed, of the database's chunks

Usage: [BENCH_STORE=s3 [BENCH_S3_QUICKACK=1]] offload-lazy.py [SIZE_MIB] [RUNS] [FILL_MIB_PER_SEC]
       (defaults 1024, 3, the shim's 64; BENCH_S3_QUICKACK=1 puts lib/quickack_proxy.py in
       front of s3s-fs, which does not set TCP_NODELAY)
Writes bench/results/offload-lazy.{txt,json} (offload-lazy-s3.* with BENCH_STORE=s3,
offload-lazy-s3-quickack.* behind the proxy; s3s-fs from target/tools/bin, as scripts/test
installs it).
"""

import json
import os
import random
import re
import shutil
import sqlite3
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

MIB = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
FILL = int(sys.argv[3]) if len(sys.argv) > 3 else None
ROW_BYTES = 215  # a row with its b-tree overhead, measured
S3 = os.environ.get("BENCH_STORE") == "s3"
S3_KEY, S3_SECRET = "bench", "bench-secret-not-for-production"


def offload_toml():
    """The [instance.offload] table: a fresh directory store, or a fresh bucket on s3s-fs."""
    if not S3:
        return '[instance.offload]\nstore = "file://%s"\nafter = "1s"\ndata_dir = "data"\n' \
            % h.tmpdir("lazy-store")
    root = h.tmpdir("lazy-s3")
    os.mkdir(os.path.join(root, "bench"))
    port = h.free_port()
    h.start([os.path.join(h.ROOT, "target", "tools", "bin", "s3s-fs"), "--host", "127.0.0.1",
             "--port", str(port), "--access-key", S3_KEY, "--secret-key", S3_SECRET, root],
            stdout=h.subprocess.DEVNULL, stderr=h.subprocess.DEVNULL)
    creds = os.path.join(h.tmpdir("lazy-s3-creds"), "s3.toml")
    fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, ('access_key_id = "%s"\nsecret_access_key = "%s"\n'
                  % (S3_KEY, S3_SECRET)).encode())
    os.close(fd)
    def listening():
        with h.socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0
    wait_for(listening, "s3s-fs")
    if os.environ.get("BENCH_S3_QUICKACK") == "1":
        # s3s-fs does not set TCP_NODELAY: see lib/quickack_proxy.py.
        target, port = port, h.free_port()
        h.start([sys.executable, os.path.join(HERE, "lib", "quickack_proxy.py"), str(port),
                 str(target)])
        wait_for(listening, "the proxy")
    return ('[instance.offload]\nstore = "s3://bench/objects"\nafter = "1s"\n'
            'data_dir = "data"\nendpoint = "http://127.0.0.1:%d"\nregion = "us-east-1"\n'
            'credentials_file = "%s"\n' % (port, creds))


def storage(relay):
    _, body = relay.admin("GET", "/v1/instances")
    return json.loads(body)[0].get("storage")


def wait_for(pred, what, timeout=600):
    deadline = time.time() + timeout
    while not pred():
        if time.time() > deadline:
            raise RuntimeError("timed out waiting for " + what)
        time.sleep(0.02)


def uploaded(relay, nth):
    hits = [l for l in relay.log_lines() if "offloaded: the data" in l]
    if len(hits) < nth:
        return None
    return int(re.search(r"\buploaded=(\d+)", hits[nth - 1]).group(1)), \
        int(re.search(r"\bchunks=(\d+)", hits[nth - 1]).group(1))


def start_relay(relay):
    relay.proc = h.start([os.path.join(relay.bin, "relay"), "run", "--config", relay.config],
                         stdout=h.subprocess.DEVNULL, stderr=open(relay.log, "a"),
                         env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"})


def point(conn, rows):
    t = time.perf_counter()
    conn.value(b"SELECT c FROM sb.t WHERE id = %d" % random.randint(1, rows))
    return (time.perf_counter() - t) * 1e3


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def main():
    rows = MIB * (1 << 20) // ROW_BYTES
    template = None
    runs = []
    for run in range(1, RUNS + 1):
        relay = h.Relay("lazy", idle_pause_after="1h",
                        shim_args=["--lazy-fill-mib-per-sec", str(FILL)] if FILL else (),
                        instance_toml=offload_toml())
        conn = m.Conn("127.0.0.1", relay.port, h.USER, h.PASSWORD)
        conn.query(b"CREATE DATABASE sb")
        conn.query(b"CREATE TABLE sb.t (id INT PRIMARY KEY, k INT, c VARCHAR(120), "
                   b"pad VARCHAR(60))")
        conn.close()
        relay.stop()
        db = os.path.join(relay.data, "db", "sb", "data.sqlite")
        if template is None:
            # Built once, with SQLite itself (a client would take minutes), then copied.
            c = sqlite3.connect(db)
            c.execute("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
                      "WHERE i < ?) INSERT INTO t SELECT i, abs(random()) % 100000, "
                      "hex(randomblob(60)), hex(randomblob(30)) FROM s", (rows,))
            c.commit()
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            c.close()
            template = h.tmpdir("lazy-template") + "/data.sqlite"
            shutil.copyfile(db, template)
        else:
            shutil.copyfile(template, db)
        size = os.path.getsize(db)
        start_relay(relay)
        wait_for(lambda: uploaded(relay, 1) is not None, "the offload")
        wait_for(lambda: storage(relay) == "offloaded", "offloaded")
        left = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(relay.data)
                   for f in fs) if os.path.exists(relay.data) else 0
        left += os.path.getsize(relay.data + ".offloaded")

        seconds, conn = m.login("127.0.0.1", relay.port, h.USER, h.PASSWORD, timeout=600)
        wake = seconds * 1e3
        first = point(conn, rows)
        hydrating = []
        last_look = time.time()
        while True:
            hydrating.append(point(conn, rows))
            if time.time() - last_look > 0.25:
                last_look = time.time()
                if storage(relay) == "local":
                    break
        warm = [point(conn, rows) for _ in range(len(hydrating))]
        conn.close()

        # The data local: woken again before its offload is due (after = 1 s).
        relay.pause()
        seconds, conn = m.login("127.0.0.1", relay.port, h.USER, h.PASSWORD, timeout=600)
        wake_local = seconds * 1e3
        conn.query(b"UPDATE sb.t SET k = k + 1 WHERE id = 12345")
        conn.close()
        relay.pause()
        wait_for(lambda: uploaded(relay, 2) is not None, "the second offload")
        sent, chunks = uploaded(relay, 2)
        relay.stop()
        runs.append({"size": size, "disk_left": left, "wake_ms": wake, "first_ms": first,
                     "hydrating_ms": hydrating, "warm_ms": warm, "wake_local_ms": wake_local,
                     "reoffload_uploaded": sent, "chunks": chunks})
        print("run %d: wake %.1f ms, first %.1f ms, %d queries while hydrating, p99 %.2f / "
              "warm %.2f ms, re-offload %d of %d chunks" % (
                  run, wake, first, len(hydrating), pct(hydrating, 0.99), pct(warm, 0.99),
                  sent, chunks), flush=True)

    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    lines = ["# offload with a lazy restore: a %d MiB server-shim database, filled in at %s MiB/s"
             ", store: %s" % (MIB, FILL or "64 (the default)",
                              ("s3s-fs on loopback%s, through the relay's socket" % (
                                  " (behind lib/quickack_proxy.py)"
                                  if os.environ.get("BENCH_S3_QUICKACK") == "1" else ""))
                              if S3
                              else "a local directory"),
             "machine: %s" % h.machine(), "",
             "run  db MiB  disk left while offloaded  paused->login OK ms  first point "
             "select ms  hydrating: queries p50 p99 ms  warm p50 p99 ms  p99 ratio  "
             "login OK, data local ms  re-offload chunks sent"]
    for i, r in enumerate(runs, 1):
        lines.append("%3d  %6.0f  %10d B (%.4f %%)  %19.1f  %23.1f  %6d %5.2f %5.2f  "
                     "%5.2f %5.2f  %9.2f  %24.1f  %d of %d" % (
                         i, r["size"] / 2**20, r["disk_left"], 100.0 * r["disk_left"] / r["size"],
                         r["wake_ms"], r["first_ms"], len(r["hydrating_ms"]),
                         pct(r["hydrating_ms"], 0.5), pct(r["hydrating_ms"], 0.99),
                         pct(r["warm_ms"], 0.5), pct(r["warm_ms"], 0.99),
                         pct(r["hydrating_ms"], 0.99) / pct(r["warm_ms"], 0.99),
                         r["wake_local_ms"], r["reoffload_uploaded"], r["chunks"]))
    lines.append("")
    lines.append("medians: login OK %.1f ms, first point select %.1f ms, p99 ratio %.2f" % (
        med([r["wake_ms"] for r in runs]), med([r["first_ms"] for r in runs]),
        med([pct(r["hydrating_ms"], 0.99) / pct(r["warm_ms"], 0.99) for r in runs])))
    # The JSON keeps each run's latency summary, not every query's.
    summary = lambda v: {"count": len(v), "p50_ms": pct(v, 0.5), "p90_ms": pct(v, 0.9),  # noqa: E731
                         "p99_ms": pct(v, 0.99), "max_ms": max(v)}
    for r in runs:
        r["hydrating_ms"], r["warm_ms"] = summary(r["hydrating_ms"]), summary(r["warm_ms"])
    name = "offload-lazy"
    if S3:
        name += "-s3-quickack" if os.environ.get("BENCH_S3_QUICKACK") == "1" else "-s3"
    h.save(name, "\n".join(lines) + "\n", runs)


if __name__ == "__main__":
    main()
