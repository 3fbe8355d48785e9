#!/usr/bin/env python3
"""Scenario 13, parking (docs/parking.md): idle pools on a frozen compute.

Part A, the bill of an idle pool: a 10-connection pool opened against a paused instance, used
once, then idle for one compressed "hour" with its keepalive running (a COM_PING per
connection every 30 s, scaled), next to the same pool on a relay with `park = false` (the
behaviour before parking: an open connection holds the instance running). Time is compressed
SCALE times: the hour lasts 3600/SCALE s, pings come every 30/SCALE s, idle_pause_after is
300/SCALE s (the 5 min default) and park_after 10/SCALE s (the 10 s default). Reported per
relay, from its own ledger and metrics: seconds running and frozen, CCU-seconds billed
(frozen_rate_ccu = 0, the default), thaws, pings the relay answered, and the first query's
latency after the hour.

Part B, the thaw on a command: a query on a parked connection (frozen compute) → its answer,
next to the same query on a running instance, alternated run by run (n each): on server-shim
(dual mode, the embedded default), on a stock MariaDB (switch mode, the process driver), and
on server-shim behind the kernel route (the session never passes through the relay).

Usage: parking.py [N] [SCALE]   (default 30 runs in part B, SCALE 60: a one-minute hour)
Writes bench/results/parking.{txt,json}. Needs root and cgroups (the freezer).
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
SCALE = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
POOL = 10
# The default park_after (10 s), scaled like the rest.
PARK_AFTER_MS = 10_000
PING = b"\x01\x00\x00\x00\x0e"


def ping(c):
    c.sock.sendall(PING)
    _, p = c.read_packet()
    if not p or p[0] != 0x00:
        raise RuntimeError("ping: %r" % p)


def usage_ccu_seconds(relay):
    _, body = relay.admin("GET", "/v1/usage")
    return sum(row.get("ccu_seconds", 0.0) for row in json.loads(body))


def idle_hour(park):
    hour, every = 3600.0 / SCALE, 30.0 / SCALE
    relay = h.Relay("parking-" + ("on" if park else "off"),
                    idle_pause_after="%dms" % int(300_000 / SCALE),
                    instance_toml="park = %s\npark_after = \"%dms\"\n" % (
                        "true" if park else "false", int(PARK_AFTER_MS / SCALE)))
    try:
        pool = [m.Conn("127.0.0.1", relay.port, h.USER, h.PASSWORD) for _ in range(POOL)]
        for c in pool:
            c.query(b"SELECT 1")
        start_ccu = usage_ccu_seconds(relay)
        start = h.ledger_seconds(relay)
        wakes0 = relay.metric('relay_wakes_total{instance="demo",outcome="ok"}')
        t_end = time.time() + hour
        while time.time() < t_end:
            tick = time.time()
            for c in pool:
                ping(c)
            time.sleep(max(0.0, every - (time.time() - tick)))
        t0 = time.perf_counter()
        # A real query (SELECT 1 is a keepalive query: the relay would answer it, frozen).
        pool[0].query(b"SELECT 2")
        first_ms = (time.perf_counter() - t0) * 1000
        end = h.ledger_seconds(relay)
        spent = {k: end.get(k, 0.0) - start.get(k, 0.0) for k in end}
        result = {
            "park": park,
            "running_s": round(spent.get("running", 0.0) + spent.get("resuming", 0.0)
                               + spent.get("pausing", 0.0), 2),
            "frozen_s": round(spent.get("frozen", 0.0), 2),
            "ccu_seconds": round(usage_ccu_seconds(relay) - start_ccu, 2),
            "thaws": int(relay.metric('relay_wakes_total{instance="demo",outcome="ok"}')
                         - wakes0),
            "pings_answered": int(relay.metric('relay_parked_answers_total{instance="demo",kind="ping"}')),
            "first_query_ms": round(first_ms, 2),
        }
        for c in pool:
            c.close()
        return result
    finally:
        relay.stop()


def thaw_latency(relay, user, password):
    """SELECT 2 on one connection: with the compute parked (frozen, thawed by the query) and
    running, alternated."""
    times = {"parked": [], "running": []}
    try:
        c = m.Conn("127.0.0.1", relay.port, user, password)
        for i in range(N + 2):
            for kind in (("parked", "running") if i % 2 == 0 else ("running", "parked")):
                if kind == "parked":
                    relay.pause(until="frozen")
                t0 = time.perf_counter()
                # Not a keepalive query: those the relay answers itself while parked.
                c.query(b"SELECT 2")
                dt = (time.perf_counter() - t0) * 1000
                if i >= 2:
                    times[kind].append(dt)
        c.close()
    finally:
        relay.stop()
    return times


def main():
    on, off = idle_hour(True), idle_hour(False)
    times = thaw_latency(h.Relay("parking-thaw"), h.USER, h.PASSWORD)
    maria_relay, _ = h.mariadb_relay("parking-thaw-mariadb")
    maria = thaw_latency(maria_relay, h.MARIADB_USER, h.MARIADB_PASSWORD)
    kernel_relay = h.Relay("parking-thaw-kernel", route="nftables")
    kernel_relay.admin("POST", "/v1/instances/demo/resume")
    kernel_relay.wait_state("running")
    kernel = thaw_latency(kernel_relay, h.USER, h.PASSWORD)
    kernel_parked, kernel_running = h.summary(kernel["parked"]), h.summary(kernel["running"])
    parked, running = h.summary(times["parked"]), h.summary(times["running"])
    maria_parked, maria_running = h.summary(maria["parked"]), h.summary(maria["running"])
    bill_ratio = on["ccu_seconds"] / off["ccu_seconds"] if off["ccu_seconds"] else None
    lines = [
        "# Parking: an idle pool's bill, and the thaw on a command",
        "machine: %s" % h.machine(),
        "",
        "## Part A: %d connections idle for one hour compressed %gx (%.0f s), a ping per "
        "connection every 30 s (scaled), idle_pause_after 5 min, park_after 10 s (scaled)" % (
            POOL, SCALE, 3600 / SCALE),
        "%-12s %10s %10s %12s %6s %15s %15s" % ("relay", "running s", "frozen s",
                                                 "CCU-seconds", "thaws", "pings answered",
                                                 "1st query ms"),
    ]
    for r in (on, off):
        lines.append("%-12s %10.2f %10.2f %12.2f %6d %15d %15.2f" % (
            "park" if r["park"] else "park=false", r["running_s"], r["frozen_s"],
            r["ccu_seconds"], r["thaws"], r["pings_answered"], r["first_query_ms"]))
    if bill_ratio is not None:
        lines.append("bill with parking / bill without: %.4f (frozen_rate_ccu = 0)" % bill_ratio)
    lines += [
        "",
        "## Part B: SELECT 2 → answer, n=%d each, alternated (SELECT 1, a keepalive query, "
        "is answered by the relay while parked)" % N,
        "server-shim (dual mode)",
        "  parked (frozen compute, thawed by the query): %s" % h.fmt(parked),
        "  running:                                      %s" % h.fmt(running),
        "  ratio of medians: %.2f" % (parked["median"] / running["median"]),
        "MariaDB %s (switch mode)" % h.mariadbd_version(),
        "  parked (frozen compute, thawed by the query): %s" % h.fmt(maria_parked),
        "  running:                                      %s" % h.fmt(maria_running),
        "  ratio of medians: %.2f" % (maria_parked["median"] / maria_running["median"]),
        "server-shim on the kernel route (the session routed by nftables; the relay thaws at "
        "the first byte in the compute's socket)",
        "  parked (frozen compute, thawed by the query): %s" % h.fmt(kernel_parked),
        "  running:                                      %s" % h.fmt(kernel_running),
        "  ratio of medians: %.2f" % (kernel_parked["median"] / kernel_running["median"]),
    ]
    h.save("parking", "\n".join(lines) + "\n",
           {"idle_hour": [on, off], "bill_ratio": bill_ratio, "thaw_ms": times,
            "thaw_ms_mariadb": maria,
            "thaw_ms_kernel_route": kernel,
            "summary": {"parked": parked, "running": running,
                        "mariadb_parked": maria_parked, "mariadb_running": maria_running,
                        "kernel_parked": kernel_parked, "kernel_running": kernel_running}, "scale": SCALE})


if __name__ == "__main__":
    try:
        main()
    finally:
        h.stop_all()
