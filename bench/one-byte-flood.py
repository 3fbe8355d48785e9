#!/usr/bin/env python3
"""Descriptors a one-byte flood holds on the direct route.

A running instance (one session open), then connections that each send one byte and stay:
3,000 from one source, then 10,000 from two sources (127.0.0.1 and 127.0.0.2). Reported: how
many were admitted (greeted by the compute) and how many got ERR 1040, the relay's open
descriptors while they wait, and whether a real login from a third source still gets through.
Defaults throughout (max_pending_connections 4096, per instance 2048, per source 1024).

Usage: one-byte-flood.py   Writes bench/results/one-byte-flood.{txt,json}.
"""

import os
import resource
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def flood(relay, sources, n):
    socks = []
    for i in range(n):
        s = socket.socket()
        s.bind((sources[i % len(sources)], 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", relay.port))
        socks.append(s)
    greeted = refused = closed = 0
    for s in socks:
        try:
            first = s.recv(5)
        except OSError:
            first = b""
        if len(first) == 5 and first[4] == 0xFF:
            refused += 1
        elif first:
            greeted += 1
            s.sendall(b"\x01")   # one byte of a login, never finished
        else:
            closed += 1
    time.sleep(0.5)   # let the relay settle its counts before descriptors are read
    held = fds(relay.proc.pid)
    t0 = time.perf_counter()
    try:
        c = m.Conn("127.0.0.1", relay.port, h.USER, h.PASSWORD, b"", 10, None, source="127.0.0.3")
        c.query(b"SELECT 1")
        c.close()
        login = "ok in %.1f ms" % ((time.perf_counter() - t0) * 1000)
    except (OSError, m.LoginError) as e:
        login = "failed: %s" % str(e)[:60]
    for s in socks:
        s.close()
    return {"sources": len(sources), "connections": n, "greeted": greeted,
            "refused_1040": refused, "closed": closed, "relay_fds": held,
            "login_from_a_third_source": login}


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    relay = h.Relay("flood", nofile=20000)
    try:
        session = m.Conn("127.0.0.1", relay.port, h.USER, h.PASSWORD, b"", 30, None)
        relay.wait_state("running")
        base = fds(relay.proc.pid)
        rows = [flood(relay, ["127.0.0.1"], 3000)]
        h.Relay.wait_state(relay, "running")
        time.sleep(1)
        rows.append(flood(relay, ["127.0.0.1", "127.0.0.2"], 10000))
        session.close()
    finally:
        relay.stop()
    lines = ["# one-byte flood on the direct route",
             "machine: %s" % h.machine(),
             "relay descriptors with one session open: %d (limit 20,000)" % base, "",
             "%-8s %-11s %8s %12s %7s %10s  %s" % ("sources", "connections", "greeted",
                                                  "ERR 1040", "closed", "relay fds",
                                                  "a real login meanwhile")]
    for r in rows:
        lines.append("%-8d %-11d %8d %12d %7d %10d  %s" % (
            r["sources"], r["connections"], r["greeted"], r["refused_1040"], r["closed"],
            r["relay_fds"], r["login_from_a_third_source"]))
    text = "\n".join(lines) + "\n"
    print(text)
    h.save("one-byte-flood", text, rows)


if __name__ == "__main__":
    main()
