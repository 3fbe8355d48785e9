#!/usr/bin/env python3
"""Offload of a MariaDB data directory: what moving a stopped mariadbd's data
directory to the store and back costs, per GiB, next to a plain copy of it.

One relay in switch mode runs a stock mariadbd (process driver) with `[instance.offload]` into
a local directory store (`after = "1s"`, `restore` in full: a MariaDB directory has no lazy
files). Its data: one InnoDB table of SIZE MiB of random bytes (4 KiB rows, so no chunk
repeats another), beside the system tables and the redo log. Then, RUNS times:

  copy      the relay stopped (and mariadbd with it): `cp -a` of the data directory on the
            same disk, then `sync`: the reference, what restoring it by hand would take
  offload   the relay started again, no compute running: its own measure ("offloaded ...
            ms="): read, hash, put (fsynced), read back and hash again, remove the local copy
  wake      paused and offloaded -> login OK from the client: the restore, then mariadbd's
            start (InnoDB recovery included)
  restore   the relay's measure of the restore alone ("restored ... ms=")
  wake local  paused with the data local (woken before the offload is due): mariadbd's start
            alone, the wake's floor

Usage: offload-mariadb.py [SIZE_MIB] [RUNS]   (defaults 1024 and 3)
Writes bench/results/offload-mariadb.{txt,json}.
"""

import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

SIZE_MIB = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def logged_ms(relay, marker, nth):
    """The ms= of the nth (from 1) log line holding marker, waiting for it."""
    deadline = time.time() + 900
    while time.time() < deadline:
        hits = [l for l in relay.log_lines() if marker in l]
        if len(hits) >= nth:
            return int(re.search(r"\bms=(\d+)", hits[nth - 1]).group(1))
        time.sleep(0.05)
    raise RuntimeError("no %r line %d:\n%s" % (marker, nth, "\n".join(relay.log_lines()[-20:])))


def wake_ms(relay):
    seconds, conn = m.login("127.0.0.1", relay.port, h.MARIADB_USER, h.MARIADB_PASSWORD,
                            timeout=900)
    conn.close()
    return seconds * 1e3


def fill(relay, mib):
    _, c = m.login("127.0.0.1", relay.port, b"root", b"")
    c.query(b"CREATE DATABASE big")
    c.query(b"CREATE TABLE big.t (id INT PRIMARY KEY, b BLOB) ENGINE=InnoDB")
    c.query(b"USE big")   # the sequence engine's seq_1_to_N lives in the current database
    rows_per_mib, batch = 256, 16384
    total = mib * rows_per_mib
    for start in range(0, total, batch):
        n = min(batch, total - start)
        c.query(("INSERT INTO t SELECT seq + %d, CONCAT(RANDOM_BYTES(1024), "
                 "RANDOM_BYTES(1024), RANDOM_BYTES(1024), RANDOM_BYTES(1016)) "
                 "FROM seq_1_to_%d" % (start, n)).encode())
    c.close()


def du_mib(path):
    out = subprocess.run(["du", "-sm", path], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def main():
    store = h.tmpdir("offload-mariadb-store")
    relay, datadir = h.mariadb_relay(
        "offload-mariadb", idle_pause_after="1h",
        instance_toml='[instance.offload]\nstore = "file://%s"\nafter = "1s"\n'
                      'data_dir = "%s"\n' % (store, "DATADIR"))
    # mariadb_relay makes the data directory; the offload must name it: rewrite and restart.
    relay.stop()
    with open(relay.config) as f:
        text = f.read()
    with open(relay.config, "w") as f:
        f.write(text.replace("DATADIR", datadir))

    def start():
        relay.proc = h.start([os.path.join(relay.bin, "relay"), "run", "--config",
                              relay.config], stdout=subprocess.DEVNULL,
                             stderr=open(relay.log, "a"),
                             env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"})
        deadline = time.time() + 20
        while True:
            try:
                relay.admin("GET", "/v1/instances")
                return
            except OSError:
                if time.time() > deadline:
                    raise

    start()
    fill(relay, SIZE_MIB)
    dir_mib = None
    copies, offloads, woken, restores, local = [], [], [], [], []
    for run in range(1, RUNS + 1):
        relay.stop()   # on_relay_exit = pause: mariadbd stops with it
        subprocess.run(["sync"], check=True)
        dir_mib = du_mib(datadir)
        copy = datadir + ".copy"
        t = time.time()
        subprocess.run(["cp", "-a", datadir, copy], check=True)
        subprocess.run(["sync"], check=True)
        copies.append((time.time() - t) * 1e3)
        shutil.rmtree(copy)
        start()
        offloads.append(logged_ms(relay, "offloaded:", run))
        woken.append(wake_ms(relay))
        restores.append(logged_ms(relay, "restored", run))
        relay.pause(timeout=300)
        # Local: the same data, woken before the offload is due (after = 1 s).
        local.append(wake_ms(relay))
    relay.stop()
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    gib = dir_mib / 1024.0
    per_gib = lambda ms: ms / gib  # noqa: E731
    lines = [
        "# offload-mariadb: a stopped mariadbd's data directory to a local directory store and back",
        "machine: %s, MariaDB %s" % (h.machine(), h.mariadbd_version()),
        "data directory: %d MiB (a %d MiB InnoDB table, the system tables, the redo log); "
        "medians of %d runs" % (dir_mib, SIZE_MIB, RUNS),
        "",
        "%-34s %10s %10s %8s" % ("step", "ms", "ms / GiB", "MiB/s"),
    ]
    for name, values in [("cp -a + sync (reference)", copies), ("offload", offloads),
                         ("restore", restores), ("wake, offloaded (restore + start)", woken),
                         ("wake, local (start only)", local)]:
        v = med(values)
        lines.append("%-34s %10.0f %10.0f %8.0f" % (name, v, per_gib(v), dir_mib / (v / 1e3)))
    lines.append("")
    lines.append("restore / copy: %.2f x; wake offloaded - wake local: %.0f ms per GiB" % (
        med(restores) / med(copies), (med(woken) - med(local)) / gib))
    h.save("offload-mariadb", "\n".join(lines) + "\n", {
        "size_mib": SIZE_MIB, "dir_mib": dir_mib, "runs": RUNS,
        "copy_ms": copies, "offload_ms": offloads, "restore_ms": restores,
        "wake_offloaded_ms": woken, "wake_local_ms": local,
    })


if __name__ == "__main__":
    main()
