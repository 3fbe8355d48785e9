#!/usr/bin/env python3
"""Scenario 1b, cold start of a stock MariaDB in auth-switch mode: paused → login OK as seen by
a lean client (which follows the one AuthSwitchRequest), next to mariadbd's own start-up.

Contenders, alternated run by run:
  cold           relay (auth = "switch"), instance paused: greet, classify, spawn mariadbd
                 (process driver), wait for its greeting, relay the switch and the answer, OK.
  relay-warm     the same relay right after: the direct route, MariaDB authenticates itself.
  mariadbd       mariadbd alone on the same data directory (while the instance is paused):
                 fork/exec → its port greets.

Usage: cold-start-mariadb.py [N]   (default 30; the first 2 iterations are warm-up)
Writes bench/results/cold-start-mariadb.{txt,json}.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
WARMUP = 2
USER, PASSWORD = h.MARIADB_USER, h.MARIADB_PASSWORD
mariadbd_cmd = h.mariadbd_cmd


def main():
    samples = {"cold": [], "relay-warm": [], "mariadbd": []}
    relay, datadir = h.mariadb_relay("cold-maria-relay")
    try:
        for i in range(N + WARMUP):
            order = ["cold", "relay-warm", "mariadbd"]
            order = order[i % 3:] + order[:i % 3]
            for contender in order:
                if contender == "cold":
                    relay.pause()
                    dt, c = m.login("127.0.0.1", relay.port, USER, PASSWORD)
                    c.close()
                elif contender == "relay-warm":
                    if relay.state() != "running":
                        m.login("127.0.0.1", relay.port, USER, PASSWORD)[1].close()
                    dt, c = m.login("127.0.0.1", relay.port, USER, PASSWORD)
                    c.close()
                else:
                    relay.pause()
                    port = h.free_port()
                    t0 = time.perf_counter()
                    p = h.start(mariadbd_cmd(datadir, port), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
                    t1 = m.wait_greeting("127.0.0.1", port, time.perf_counter() + 60)
                    dt = t1 - t0
                    h.stop(p, grace=30)
                if i >= WARMUP:
                    samples[contender].append(dt * 1000)
    finally:
        relay.stop()
        h.stop_all()
    lines = ["cold start, MariaDB %s in auth-switch mode (n=%d each; ms)" % (
        h.mariadbd_version(), N), "machine: %s" % h.machine(), ""]
    for k, xs in samples.items():
        lines.append("%-11s %s" % (k, h.fmt(h.summary(xs))))
    med = {k: h.summary(xs)["median"] for k, xs in samples.items()}
    lines.append("")
    lines.append("cold / mariadbd start-up median ratio: %.2fx (the relay's share: %.1f ms)"
                 % (med["cold"] / med["mariadbd"], med["cold"] - med["mariadbd"]))
    text = "\n".join(lines)
    print(text)
    h.save("cold-start-mariadb", text, samples)


if __name__ == "__main__":
    main()
