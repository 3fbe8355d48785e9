#!/usr/bin/env python3
"""Offload: what moving a paused instance's data to the store and back costs.

For each size, a relay whose instance has SIZE MiB of data (server-shim's data directory with
an incompressible file of that size beside its accounts) and `[instance.offload]` into a local
directory store (`after = "1s"`):

  offload   the relay's own measure ("offloaded ... ms="): read, hash, put (fsynced), read
            back and hash again, then remove the local copy
  restore   its measure ("restored ... ms="): get, hash, write, fsync, rename
  wake      paused -> login OK from the client, with the data offloaded, next to the same
            instance with its data local (the same relay, offload disabled), RUNS times each
  copy      the reference for the restore: `cp -a` of the same data directory on the same
            disk, then `sync` (what restoring it by hand would take)

Usage: offload.py [SIZES_MIB] [RUNS]   (defaults 256,1024 and 3)
Writes bench/results/offload.{txt,json}.
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

SIZES = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "256,1024").split(",")]
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def ballast(path, mib):
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(mib):
            # Each MiB differs, so no chunk repeats another.
            f.write(i.to_bytes(8, "little") + block[8:])


def logged_ms(relay, marker, nth):
    """The ms= of the nth (from 1) log line holding marker, waiting for it."""
    deadline = time.time() + 600
    while time.time() < deadline:
        hits = [l for l in relay.log_lines() if marker in l]
        if len(hits) >= nth:
            return int(re.search(r"\bms=(\d+)", hits[nth - 1]).group(1))
        time.sleep(0.05)
    raise RuntimeError("no %r line %d:\n%s" % (marker, nth, "\n".join(relay.log_lines()[-20:])))


def wake_ms(relay):
    seconds, conn = m.login("127.0.0.1", relay.port, h.USER, h.PASSWORD, timeout=600)
    conn.close()
    return seconds * 1e3


def main():
    results = {}
    lines = ["# offload: a paused instance's data to a local directory store and back",
             "machine: %s" % h.machine(), "",
             "size MiB  offload ms  MiB/s  restore ms  MiB/s  cp -a + sync ms  MiB/s  "
             "wake offloaded ms (median)  wake local ms (median)"]
    for mib in SIZES:
        offloads, restores, woken, copies = [], [], [], []
        local = []
        for run in range(1, RUNS + 1):
            store = h.tmpdir("offload-store-%d" % mib)
            relay = h.Relay("offload-%d" % mib, idle_pause_after="1h",
                            instance_toml='[instance.offload]\nstore = "file://%s"\n'
                            'after = "1s"\ndata_dir = "data"\n' % store)
            # Stopped before its offload is due, the data made big, then run again.
            relay.stop()
            ballast(os.path.join(relay.data, "ballast"), mib)
            subprocess.run(["sync"], check=True)
            copy = relay.data + ".copy"
            t = time.time()
            subprocess.run(["cp", "-a", relay.data, copy], check=True)
            subprocess.run(["sync"], check=True)
            copies.append((time.time() - t) * 1e3)
            shutil.rmtree(copy)
            relay.proc = h.start([os.path.join(relay.bin, "relay"), "run", "--config",
                                  relay.config], stdout=h.subprocess.DEVNULL,
                                 stderr=open(relay.log, "a"),
                                 env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"})
            offloads.append(logged_ms(relay, "offloaded:", 1))
            woken.append(wake_ms(relay))
            restores.append(logged_ms(relay, "restored", 1))
            relay.pause()
            # Local: the same data, the offload not yet due (after = 1 s, woken at once).
            local.append(wake_ms(relay))
            relay.stop()
        med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        results[mib] = {"offload_ms": offloads, "restore_ms": restores, "copy_ms": copies,
                        "wake_offloaded_ms": woken, "wake_local_ms": local}
        lines.append("%8d  %10d  %5.0f  %10d  %5.0f  %15d  %5.0f  %26.1f  %22.1f" % (
            mib, med(offloads), mib / (med(offloads) / 1e3), med(restores),
            mib / (med(restores) / 1e3), med(copies), mib / (med(copies) / 1e3),
            med(woken), med(local)))
    h.save("offload", "\n".join(lines) + "\n", results)


if __name__ == "__main__":
    main()
