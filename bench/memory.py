#!/usr/bin/env python3
"""Scenario 3, memory: RSS of the relay and of HAProxy holding idle forwarded connections.

The "compute" is bench/lib/greeter.py (greets like MySQL, then holds every connection). The
relay uses an exec driver whose start/stop/status are `true`, so it adopts the running
greeter and every connection takes the direct route (raw L4 forwarding, like HAProxy in TCP
mode). A client opens connections one by one through the proxy and reads each greeting (proof
that the connection is forwarded end to end), then holds them idle.

Per run (fresh proxy process each time): VmRSS idle (after 10 warm-up connections were
opened and closed), with 1,000 connections, and with N_MAX connections; bytes per connection
= (RSS_n − RSS_idle) / n. Contenders alternate run by run.

N_MAX is 10,000, or less when the hard RLIMIT_NOFILE does not allow a proxy 2·N + slack
descriptors (this script cannot raise the hard limit without CAP_SYS_RESOURCE).

Usage: memory.py [RUNS]   (default 3)
Writes bench/results/memory.{txt,json}.
"""

import os
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
N_MAX = min(10000, (HARD - 200) // 2 // 100 * 100)
STEPS = [1000, N_MAX]
resource.setrlimit(resource.RLIMIT_NOFILE, (HARD, HARD))


def haproxy(port, backend):
    d = h.tmpdir("haproxy")
    cfg = os.path.join(d, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write("""global
    maxconn %d
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend fe
    bind 127.0.0.1:%d
    maxconn %d
    default_backend be
backend be
    server s1 127.0.0.1:%d maxconn %d
""" % (N_MAX + 50, port, N_MAX + 50, backend, N_MAX + 50))
    p = h.start(["haproxy", "-db", "-f", cfg], stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(d, "haproxy.log"), "w"))
    return p


def wait_port(port):
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.01)


def open_conns(port, n, held):
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        got = s.recv(4)
        if len(got) != 4:
            raise RuntimeError("no greeting through the proxy")
        s.recv(1024)
        held.append(s)


def measure(kind, greeter_port):
    if kind == "relay":
        r = h.Relay("memory", compute_port=greeter_port, driver="adopt", nofile=HARD)
        r.wait_state("running")
        proc, port = r.proc, r.port
    else:
        port = h.free_port()
        proc = haproxy(port, greeter_port)
        wait_port(port)
    held = []
    open_conns(port, 10, held)
    for s in held:
        s.close()
    held.clear()
    time.sleep(0.5)
    rss = {0: h.rss_kib(proc.pid)}
    opened = 0
    for n in STEPS:
        open_conns(port, n - opened, held)
        opened = n
        time.sleep(1.0)
        rss[n] = h.rss_kib(proc.pid)
    for s in held:
        s.close()
    if kind == "relay":
        r.stop()
    else:
        h.stop(proc)
    time.sleep(0.5)
    return rss


def main():
    gport = h.free_port()
    greeter = h.start([sys.executable, os.path.join(os.path.dirname(__file__), "lib",
                                                    "greeter.py"), str(gport)])
    wait_port(gport)
    runs = []
    order = ["relay", "haproxy"]
    for i in range(RUNS):
        for kind in (order if i % 2 == 0 else order[::-1]):
            rss = measure(kind, gport)
            runs.append({"run": i, "contender": kind, "rss_kib": rss,
                         "bytes_per_conn": {n: (rss[n] - rss[0]) * 1024 / n for n in STEPS}})
    h.stop(greeter)

    out = ["# memory: idle forwarded connections (direct route vs HAProxy TCP mode), %d runs each"
           % RUNS, "machine: %s" % h.machine(),
           "hard RLIMIT_NOFILE %d -> largest step %d connections" % (HARD, N_MAX), "",
           "per run: VmRSS KiB idle / @1000 / @%d, bytes per connection @1000 / @%d" % (
               N_MAX, N_MAX)]
    for r in runs:
        out.append("  run %d %-8s %7d / %7d / %7d KiB   %7.0f / %7.0f B/conn" % (
            r["run"], r["contender"], r["rss_kib"][0], r["rss_kib"][1000], r["rss_kib"][N_MAX],
            r["bytes_per_conn"][1000], r["bytes_per_conn"][N_MAX]))
    out += ["", "medians:"]
    med = {}
    for kind in order:
        rs = [r for r in runs if r["contender"] == kind]
        med[kind] = {n: h.summary([r["bytes_per_conn"][n] for r in rs]) for n in STEPS}
        med[kind]["rss"] = {n: h.summary([r["rss_kib"][n] for r in rs]) for n in [0] + STEPS}
        out.append("  %-8s RSS idle %6.0f KiB, @1000 %6.0f KiB, @%d %6.0f KiB; bytes/conn "
                   "@1000 %6.0f (min %.0f max %.0f), @%d %6.0f (min %.0f max %.0f)" % (
                       kind, med[kind]["rss"][0]["median"], med[kind]["rss"][1000]["median"],
                       N_MAX, med[kind]["rss"][N_MAX]["median"],
                       med[kind][1000]["median"], med[kind][1000]["min"], med[kind][1000]["max"],
                       N_MAX, med[kind][N_MAX]["median"], med[kind][N_MAX]["min"],
                       med[kind][N_MAX]["max"]))
    rb = med["relay"][N_MAX]["median"]
    out += ["", "relay / HAProxy bytes per connection @%d: %.2fx" % (
        N_MAX, rb / med["haproxy"][N_MAX]["median"]),
        "target <= 8 KiB (8192 B) per connection: %s (%.0f B @%d)" % (
            "MET" if rb <= 8192 else "MISSED", rb, N_MAX), ""]
    h.save("memory", "\n".join(out), {"n_max": N_MAX, "runs": runs, "medians": med})


if __name__ == "__main__":
    main()
