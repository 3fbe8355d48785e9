#!/usr/bin/env python3
"""Endpoints: one `[[endpoint]]` (route_by = "user@instance") in front of N
instances, for each N of COUNTS, one relay per N:

  start-up      relay spawned -> the endpoint greets (the whole configuration read, every
                instance set up, its ledger state read)
  rss           the relay's resident memory once started and settled; per paused instance:
                the difference between the largest and smallest N, divided
  idle cpu      the relay's CPU time over 10 s with every instance paused and no client
  unknown       a login naming no instance (app@nosuch): connect -> ERR 1045, p50 / p99
  wake          paused -> login OK for instance i0 through the endpoint (its compute starts)
  running       login OK to the running i0: through the endpoint (the perceptron route) and
                through i0's own listen address (the direct route), p50 / p99

Only i0 has an account and ever starts; the other instances are configured like it (process
driver, server-shim) and stay paused.

Usage: endpoints.py [COUNTS] [LOGINS]   (defaults 10,10000 and 200)
Writes bench/results/endpoints.{txt,json}.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

COUNTS = [int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "10,10000").split(",")]
LOGINS = int(sys.argv[2]) if len(sys.argv) > 2 else 200


def start_relay(n):
    d = h.tmpdir("endpoints-%d" % n)
    key = os.path.join(d, "perceptron.key")
    h.subprocess.run([os.path.join(h.BIN, "relay"), "keygen", "--id", "bench", "--out", key],
                     check=True, capture_output=True)
    data = os.path.join(d, "data")
    h.add_user(data)
    endpoint, own, admin, compute = h.free_port(), h.free_port(), h.free_port(), h.free_port()
    shim = os.path.join(h.BIN, "server-shim")
    lines = ['[relay]\nstate_dir = "state"\nkey_file = "perceptron.key"\n'
             'admin_listen = "127.0.0.1:%d"\n[relay.budgets]\nwakes_per_source = 0\n'
             'wakes_per_user = 0\nfailed_logins_per_source = 0\nfailed_logins_per_user = 0\n\n'
             '[[endpoint]]\nlisten = "127.0.0.1:%d"\nroute_by = "user@instance"\n' % (admin, endpoint)]
    for i in range(n):
        port = compute if i == 0 else 20000 + i
        listen = 'listen = "127.0.0.1:%d"\n' % own if i == 0 else ""
        lines.append('[[instance]]\nname = "i%d"\n%scompute = "127.0.0.1:%d"\n'
                     'idle_pause_after = "1h"\n[instance.driver]\nkind = "process"\n'
                     'command = ["%s", "run", "--listen", "127.0.0.1:%d", "--data", "%s", '
                     '"--key-file", "%s"]\n'
                     % (i, listen, port, shim, port, data if i == 0 else data + "-%d" % i, key))
    config = os.path.join(d, "relay.toml")
    with open(config, "w") as f:
        f.write("\n".join(lines))
    log = os.path.join(d, "relay.log")
    t0 = time.perf_counter()
    proc = h.start([os.path.join(h.BIN, "relay"), "run", "--config", config],
                   stdin=h.subprocess.DEVNULL, stdout=h.subprocess.DEVNULL,
                   stderr=open(log, "w"), env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"})
    greeted = m.wait_greeting("127.0.0.1", endpoint, time.time() + 600)
    return {"proc": proc, "dir": d, "endpoint": endpoint, "own": own, "admin": admin,
            "startup_ms": (greeted - t0) * 1e3, "log": log}


def admin(r, method, path):
    c = h.http.client.HTTPConnection("127.0.0.1", r["admin"], timeout=120)
    c.request(method, path)
    resp = c.getresponse()
    body = resp.read().decode()
    c.close()
    return resp.status, body


def timed(f, count):
    out = []
    for _ in range(count):
        t = time.perf_counter()
        f()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def refused(port):
    try:
        m.Conn("127.0.0.1", port, b"app@nosuch", h.PASSWORD).close()
    except m.LoginError as e:
        assert "1045" in str(e) or "Access denied" in str(e), e
        return
    raise RuntimeError("a login naming no instance was let in")


def login(port, user):
    m.Conn("127.0.0.1", port, user, h.PASSWORD).close()


def main():
    results = {}
    for n in COUNTS:
        r = start_relay(n)
        pid = r["proc"].pid
        time.sleep(5)  # settle: what the relay holds at rest, not while starting
        rss = h.rss_kib(pid)
        cpu0 = h.cpu_seconds(pid)
        time.sleep(10)
        idle_cpu = (h.cpu_seconds(pid) - cpu0) / 10
        unknown = timed(lambda: refused(r["endpoint"]), LOGINS)
        wakes = []
        for _ in range(5):
            wakes += timed(lambda: login(r["endpoint"], b"app@i0"), 1)
            deadline = time.time() + 30
            while True:
                # 200 once stopped (the pause waits for the driver); 409 while the last
                # login's connection is still closing.
                status, body = admin(r, "POST", "/v1/instances/i0/pause")
                if status == 200:
                    break
                if time.time() > deadline:
                    raise RuntimeError("i0 never paused: %s" % body)
                time.sleep(0.01)
        login(r["endpoint"], b"app@i0")
        via_endpoint = timed(lambda: login(r["endpoint"], b"app@i0"), LOGINS)
        via_own = timed(lambda: login(r["own"], b"app"), LOGINS)
        h.stop(r["proc"], 60)
        results[n] = {"startup_ms": r["startup_ms"], "rss_kib": rss, "idle_cpu_per_s": idle_cpu,
                      "unknown": h.summary(unknown), "wake": h.summary(wakes),
                      "running_endpoint": h.summary(via_endpoint),
                      "running_own": h.summary(via_own)}
        print("N=%d: start-up %.0f ms, rss %d KiB, idle cpu %.3f s/s, unknown p50 %.2f ms, "
              "wake p50 %.1f ms, running: endpoint p50 %.2f / own listen p50 %.2f ms" % (
                  n, r["startup_ms"], rss, idle_cpu, h.pctl(unknown, 50), h.pctl(wakes, 50),
                  h.pctl(via_endpoint, 50), h.pctl(via_own, 50)), flush=True)

    lines = ["# endpoints: one listener in front of N instances (route_by = \"user@instance\")",
             "machine: %s" % h.machine(), "",
             "N  start-up ms  RSS KiB  idle CPU s/s  unknown p50 p99 ms  wake p50 ms  "
             "running via endpoint p50 p99 ms  via own listen p50 p99 ms"]
    for n, r in results.items():
        lines.append("%d  %.0f  %d  %.4f  %.2f %.2f  %.1f  %.2f %.2f  %.2f %.2f" % (
            n, r["startup_ms"], r["rss_kib"], r["idle_cpu_per_s"], r["unknown"]["median"],
            r["unknown"]["p99"], r["wake"]["median"], r["running_endpoint"]["median"],
            r["running_endpoint"]["p99"], r["running_own"]["median"], r["running_own"]["p99"]))
    if len(results) > 1:
        lo, hi = min(results), max(results)
        per = (results[hi]["rss_kib"] - results[lo]["rss_kib"]) * 1024 / (hi - lo)
        cpu = (results[hi]["idle_cpu_per_s"] - results[lo]["idle_cpu_per_s"]) / (hi - lo)
        lines += ["", "per paused instance (N=%d against N=%d): %.0f B of RSS, %.2f us of "
                  "relay CPU per second idle" % (hi, lo, per, cpu * 1e6)]
    h.save("endpoints", "\n".join(lines) + "\n", results)


if __name__ == "__main__":
    main()
