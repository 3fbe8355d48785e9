#!/usr/bin/env python3
"""Logins at the idle boundary (docs/operations.md, "Only real sessions keep an instance awake"):
a client 100 ms away connects to a running instance just as its idle pause falls due.

A direct-route connection is greeted by the compute at once but answers only a round trip
later; an idle pause that lands in between must not stop the compute under it. Each round:
one login wakes the instance (or finds it running) and closes, the client waits until the
instance has been idle for `idle_pause_after` minus a random 0-300 ms, then connects through
a userspace proxy that delays every chunk by DELAY_MS each way, logs in and runs `SELECT 1`.
Counted: failed logins (the failure's text), and how many rounds found the compute stopped
under them anyway (the pause won before the accept: the login then wakes a new compute,
which is correct) versus on the same compute.

Usage: idle-boundary.py [N] [DELAY_MS]   (default 200 rounds, 100 ms)
A/B: BENCH_RELAY_B=/path/to/other/relay runs the same rounds on that build too.
Writes bench/results/idle-boundary.{txt,json}.
"""

import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402
from quickack_proxy import pump  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
DELAY_MS = float(sys.argv[2]) if len(sys.argv) > 2 else 100.0
IDLE_MS = 1000


class DelayProxy:
    """Forwards LISTEN → 127.0.0.1:target, each chunk delayed by `delay` seconds each way."""

    def __init__(self, target, delay):
        self.target, self.delay = target, delay
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=pump, args=(src, dst, False, self.delay),
                                 daemon=True).start()




def rounds(label, binary=None, env=None):
    relay = h.Relay("idle-boundary-" + label, idle_pause_after="%dms" % IDLE_MS,
                    binary=binary, env=env)
    proxy = DelayProxy(relay.port, DELAY_MS / 1000.0)
    failures, same, restarted = [], 0, 0
    try:
        for _ in range(N):
            c = m.Conn("127.0.0.1", relay.port, h.USER, h.PASSWORD)
            c.sock.close()
            relay.wait_state("running")
            pid_before = relay.metric('relay_wakes_total{instance="demo",outcome="ok"}')
            time.sleep(max(0.0, IDLE_MS - random.uniform(0, 300)) / 1000.0)
            try:
                c = m.Conn("127.0.0.1", proxy.port, h.USER, h.PASSWORD, timeout=30)
                c.sock.sendall(b"\x09\x00\x00\x00\x03SELECT 1")
                c.read_packet()
                c.sock.close()
                woke = relay.metric('relay_wakes_total{instance="demo",outcome="ok"}')
                if woke > pid_before:
                    restarted += 1
                else:
                    same += 1
            except (OSError, m.LoginError) as e:
                failures.append("%s: %s" % (type(e).__name__, e))
    finally:
        relay.stop()
    return {"n": N, "failed": len(failures), "same_compute": same,
            "woke_again": restarted, "failures": failures[:5]}


def main():
    results = {"machine": h.machine(), "delay_ms": DELAY_MS, "idle_pause_after_ms": IDLE_MS,
               "this build": rounds("a")}
    b = h.relay_b_from_env()
    if b:
        results["B: " + b[0]] = rounds("b", binary=b[0], env=b[1])
    lines = ["Logins at the idle boundary: a client %.0f ms away connects 0-300 ms before "
             "an idle pause of %d ms falls due, %d rounds" % (DELAY_MS, IDLE_MS, N)]
    for name, r in results.items():
        if isinstance(r, dict) and "failed" in r:
            lines.append("  %-40s failed %d of %d; on the same compute %d, woke a new one %d%s"
                         % (name, r["failed"], r["n"], r["same_compute"], r["woke_again"],
                            ("; e.g. " + r["failures"][0]) if r["failures"] else ""))
    h.save("idle-boundary", "\n".join(lines) + "\n", results)


if __name__ == "__main__":
    main()
