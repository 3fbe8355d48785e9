#!/usr/bin/env python3
"""Scenario 1, cold start: paused instance → login OK, as seen by a lean client.

Contenders, alternated run by run (the order rotates every iteration):
  cold          relay, instance paused: greet, classify, spawn server-shim (process driver),
                wait for its greeting, relayed login, OK.            (one wake per run)
  relay-warm    the same relay right after the cold login: the instance runs, so the new
                connection takes the direct route and the shim authenticates it itself.
  shim-warm     the same lean login straight to an already-running server-shim (no relay).
  spawn         server-shim alone: fork/exec → its port greets (polled every 0.5 ms).
  cold-b        only when BENCH_RELAY_B names another relay binary: "cold" through that build
                (BENCH_RELAY_B_ENV="K=V ..." adds environment), to compare two builds in one run.

Between runs the instance is paused with POST /v1/instances/demo/pause and the script waits
until GET /v1/instances says "paused". Phase breakdown of each cold run from the relay's log
timestamps (µs) and the client's wall clock marks:
  greeting       client connect → relay greeting received
  classification client sent its login → relay starts the wake ("resuming")
  spawn          "resuming" → "compute spawned" (fork/exec)
  compute ready  "compute spawned" → "compute ready" (relay's readiness probe saw a greeting);
                 of which shim_boot = spawned → the shim's own "server-shim ready" line,
                 and probe_lag = shim ready → relay saw it
  relayed login  "compute ready" → "relayed login accepted" (connect to compute, signed
                 payload, compute's OK; includes the waiter's wake-up)
  ok delivery    "relayed login accepted" → client read the OK

Usage: cold-start.py [N]   (N ≥ 50 runs, default 60; the first 3 iterations are warm-up)
Writes bench/results/cold-start.{txt,json}.
"""

import os
import re
import sys
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 60
WARMUP = 3
HOST = "127.0.0.1"


def ts(line):
    t = line.split(" ", 1)[0]
    return datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def inner_ts(line):
    mm = re.search(r"compute: (\S+Z)", line)
    return ts(mm.group(1) + " x") if mm else None


def main():
    relay = h.Relay("cold")
    # A warm, standalone shim with its own data directory and account (same binary).
    warm_dir = os.path.join(relay.dir, "warm")
    os.makedirs(warm_dir)
    h.add_user(os.path.join(warm_dir, "data"))
    warm_port = h.free_port()
    warm = h.start(h.Relay.shim_cmd(warm_port, os.path.join(warm_dir, "data"), relay.key),
                   stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    m.wait_greeting(HOST, warm_port, time.perf_counter() + 10)
    spawn_dir = os.path.join(relay.dir, "spawn")
    os.makedirs(spawn_dir)
    h.add_user(os.path.join(spawn_dir, "data"))

    res = {"cold": [], "relay-warm": [], "shim-warm": [], "spawn": []}
    cold_ports = []
    relay_b = None
    b = h.relay_b_from_env()
    if b:
        relay_b = h.Relay("cold-b", binary=b[0], env=b[1])
        res["cold-b"] = []

    def cold_b():
        relay_b.pause()
        dt, c = m.login(HOST, relay_b.port, h.USER, h.PASSWORD)
        c.close()
        res["cold-b"].append(dt)

    def cold():
        relay.pause()
        assert relay.state() == "paused"
        dt, c = m.login(HOST, relay.port, h.USER, h.PASSWORD)
        c.close()
        res["cold"].append(dt)
        cold_ports.append((c.local_port, c.wall))
        dt, c = m.login(HOST, relay.port, h.USER, h.PASSWORD)   # direct route now
        c.close()
        res["relay-warm"].append(dt)

    def shim_warm():
        dt, c = m.login(HOST, warm_port, h.USER, h.PASSWORD)
        c.close()
        res["shim-warm"].append(dt)

    def spawn():
        port = h.free_port()
        t0 = time.perf_counter()
        p = h.start(h.Relay.shim_cmd(port, os.path.join(spawn_dir, "data"), relay.key),
                    stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
        t1 = m.wait_greeting(HOST, port, t0 + 10, poll=0.0005)
        res["spawn"].append(t1 - t0)
        h.stop(p)

    order = [cold, shim_warm, spawn] + ([cold_b] if relay_b else [])
    for i in range(N + WARMUP):
        if i == WARMUP:
            for v in res.values():
                v.clear()
            cold_ports.clear()
        k = i % len(order)
        for f in order[k:] + order[:k]:
            f()
    wakes = relay.metric("relay_wakes_total")
    lines = relay.log_lines()
    relay.stop()
    if relay_b:
        relay_b.stop()
    h.stop(warm)

    # Phase breakdown from the log.
    phases = {k: [] for k in ("greeting", "classification", "spawn", "compute_ready", "shim_boot",
                              "probe_lag", "relayed_login", "ok_delivery", "resume_ms_logged")}
    accepted = {}
    for idx, line in enumerate(lines):
        if "relayed login accepted" in line:
            mm = re.search(r"client=127\.0\.0\.1:(\d+)", line)
            accepted[int(mm.group(1))] = idx
    for port, wall in cold_ports:
        j = accepted.get(port)
        if j is None:
            continue
        # Walk back from the accepted line to this wake's lines.
        marks = {}
        for line in reversed(lines[:j]):
            if "relay::control: resuming" in line and "resuming" not in marks:
                marks["resuming"] = ts(line)
                break
            if "compute spawned" in line and "spawned" not in marks:
                marks["spawned"] = ts(line)
            elif "server-shim ready" in line and "shim_ready" not in marks:
                marks["shim_ready"] = inner_ts(line)
            elif "compute ready" in line and "ready" not in marks:
                marks["ready"] = ts(line)
            elif "relay::control: running" in line and "running" not in marks:
                marks["running"] = ts(line)
                phases["resume_ms_logged"].append(float(h.kv(line)["resume_ms"]) / 1000)
        if len(marks) < 5:
            continue
        acc = ts(lines[j])
        phases["greeting"].append(wall["greeting"] - wall["connect"])
        phases["classification"].append(marks["resuming"] - wall["login_sent"])
        phases["spawn"].append(marks["spawned"] - marks["resuming"])
        phases["compute_ready"].append(marks["ready"] - marks["spawned"])
        phases["shim_boot"].append(marks["shim_ready"] - marks["spawned"])
        phases["probe_lag"].append(marks["ready"] - marks["shim_ready"])
        phases["relayed_login"].append(acc - marks["ready"])
        phases["ok_delivery"].append(wall["ok"] - acc)

    s = {k: h.summary(v, 1000) for k, v in res.items()}
    p = {k: h.summary(v, 1000) for k, v in phases.items()}
    ratio = s["cold"]["median"] / s["shim-warm"]["median"]
    out = ["# cold start (%d runs each, contenders alternated, %d warm-up iterations dropped)"
           % (N, WARMUP), "machine: %s" % h.machine(), ""]
    for k in res:
        out.append("%-11s %s" % (k, h.fmt(s[k])))
    out += ["", "cold / shim-warm median ratio: %.1fx" % ratio,
            "wakes counted by the relay (incl. warm-up): %d for %d cold runs" % (wakes, N + WARMUP),
            "", "phases of the cold runs (log µs timestamps + client wall clock; n=%d):"
            % p["spawn"].get("n", 0)]
    for k in phases:
        out.append("  %-16s %s" % (k, h.fmt(p[k], digits=3)))
    tgt50 = s["cold"]["median"] <= 50
    tgt99 = s["cold"]["p99"] <= 150
    out += ["", "target p50 <= 50 ms: %s (%.2f ms); target p99 <= 150 ms: %s (%.2f ms)"
            % ("MET" if tgt50 else "MISSED", s["cold"]["median"],
               "MET" if tgt99 else "MISSED", s["cold"]["p99"]),
            "MariaDB switch mode: bench/cold-start-mariadb", ""]
    if relay_b:
        out.insert(-1, "cold-b (%s) / cold median ratio: %.3fx"
                   % (b[0], s["cold-b"]["median"] / s["cold"]["median"]))
    h.save("cold-start", "\n".join(out), {"runs": N, "samples_ms": {k: [x * 1000 for x in v]
                                                                   for k, v in res.items()},
                                          "summary_ms": s, "phases_ms": p, "wakes": wakes,
                                          "ratio_cold_over_warm": ratio})


if __name__ == "__main__":
    main()
