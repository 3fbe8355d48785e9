#!/usr/bin/env python3
"""Scenario 4, connect storm: C clients (default 1,000) log in at once.

Contenders, alternated run by run:
  cold        relay, instance paused: every client is held by the perceptron while one wake
              starts server-shim; wakes must be 1 and successes must be C.
  relay-warm  the same relay with the instance running: all C take the direct route.
  shim-warm   the same C logins straight to a running server-shim (no relay).

Clients are asyncio coroutines in one Python process using the lean login (raw sockets,
mysql_native_password by hand); latency is connect() → OK packet per client. All C are
started together; the client process itself is part of the measured system (2 cores).

Usage: storm.py [CLIENTS] [RUNS]   (defaults 1000 and 5)
Writes bench/results/storm.{txt,json}.
"""

import asyncio
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

C = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
HOST = "127.0.0.1"
NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[1]   # the hard limit


async def storm(port):
    async def one():
        try:
            return await m.alogin(HOST, port, h.USER, h.PASSWORD, timeout=60)
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported
            return e
    t0 = time.perf_counter()
    out = await asyncio.gather(*[one() for _ in range(C)])
    wall = time.perf_counter() - t0
    lat = [x for x in out if isinstance(x, float)]
    errs = {}
    for x in out:
        if not isinstance(x, float):
            k = "%s: %s" % (type(x).__name__, str(x)[:80])
            errs[k] = errs.get(k, 0) + 1
    return lat, errs, wall


def main():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
    relay = h.Relay("storm", nofile=NOFILE)
    warm_dir = os.path.join(relay.dir, "warm")
    os.makedirs(warm_dir)
    h.add_user(os.path.join(warm_dir, "data"))
    warm_port = h.free_port()
    warm = h.start(h.Relay.shim_cmd(warm_port, os.path.join(warm_dir, "data"), relay.key),
                   stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    m.wait_greeting(HOST, warm_port, time.perf_counter() + 10)

    runs = []
    backlog = {"relay listener": h.listen_backlog(relay.port),
               "standalone shim": h.listen_backlog(warm_port)}
    lat_all = {"cold": [], "relay-warm": [], "shim-warm": []}

    def run_cold():
        relay.pause()
        w0 = relay.metric("relay_wakes_total")
        o0 = h.tcpext("ListenOverflows")
        lat, errs, wall = asyncio.run(storm(relay.port))
        wakes = relay.metric("relay_wakes_total") - w0
        backlog["compute (server-shim)"] = h.listen_backlog(relay.compute_port)
        return {"contender": "cold", "wakes": wakes, "ok": len(lat), "errors": errs,
                "wall_s": wall, "lat": lat, "listen_overflows": h.tcpext("ListenOverflows") - o0}

    def run_warm(name, port):
        def f():
            if name == "relay-warm" and relay.state() != "running":
                relay.admin("POST", "/v1/instances/demo/resume")
                relay.wait_state("running")
            o0 = h.tcpext("ListenOverflows")
            lat, errs, wall = asyncio.run(storm(port))
            return {"contender": name, "ok": len(lat), "errors": errs, "wall_s": wall, "lat": lat,
                    "listen_overflows": h.tcpext("ListenOverflows") - o0}
        return f

    order = [run_cold, run_warm("relay-warm", relay.port), run_warm("shim-warm", warm_port)]
    for i in range(RUNS):
        k = i % len(order)
        for f in order[k:] + order[:k]:
            r = f()
            lat_all[r["contender"]] += r["lat"]
            r["summary_ms"] = h.summary(r.pop("lat"), 1000)
            r["run"] = i
            runs.append(r)
            time.sleep(0.5)   # let closed sockets drain between storms
    relay.stop()
    h.stop(warm)

    out = ["# connect storm: %d clients at once, %d runs per contender (alternated)" % (C, RUNS),
           "machine: %s" % h.machine(), "", "per run:"]
    for r in runs:
        s = r["summary_ms"]
        out.append("  run %d %-10s ok %4d/%d%s  wall %6.0f ms  p50 %7.2f  p95 %7.2f  p99 %7.2f"
                   "  max %7.2f ms  listen overflows %d%s" % (
                       r["run"], r["contender"], r["ok"], C,
                       ("  wakes %d" % r["wakes"]) if "wakes" in r else "",
                       r["wall_s"] * 1000, s.get("median", 0), s.get("p95", 0), s.get("p99", 0),
                       s.get("max", 0), r["listen_overflows"], ("  errors %s" % r["errors"]) if r["errors"] else ""))
    out += ["", "all runs pooled (login latency, connect → OK):"]
    pooled = {k: h.summary(v, 1000) for k, v in lat_all.items()}
    for k, s in pooled.items():
        out.append("  %-10s %s" % (k, h.fmt(s)))
    cold = [r for r in runs if r["contender"] == "cold"]
    wakes_ok = all(r["wakes"] == 1 for r in cold)
    succ_ok = all(r["ok"] == C for r in cold)
    ratio = pooled["cold"]["median"] / pooled["shim-warm"]["median"]
    out += ["", "cold / shim-warm median ratio: %.2fx; relay-warm / shim-warm: %.2fx" % (
        ratio, pooled["relay-warm"]["median"] / pooled["shim-warm"]["median"]),
        "listen backlogs (ss Send-Q): %s; ListenOverflows is the system-wide TcpExt counter"
        " delta during the run" % backlog,
        "target wakes == 1 in every cold run: %s (%s)" % (
            "MET" if wakes_ok else "MISSED", [r["wakes"] for r in cold]),
        "target successes == %d in every cold run: %s (%s)" % (
            C, "MET" if succ_ok else "MISSED", [r["ok"] for r in cold]), ""]
    h.save("storm", "\n".join(out), {"clients": C, "runs": runs, "pooled_ms": pooled,
                          "listen_backlog": backlog})


if __name__ == "__main__":
    main()
