#!/usr/bin/env python3
"""The regression guard (bench/guard): this tree's release build ("new", target/release) next
to a base build ("base", GUARD_BASE_BIN), scenario by scenario, alternated run by run.

  cold      stopped → login OK: the instance's compute is stopped (paused), a lean login
            spawns server-shim and is relayed. GUARD_N logins per build.
  frozen    frozen → login OK: `stop_after` set, so the pause freezes the compute (cgroup
            freezer) and the login thaws it. GUARD_N per build; skipped without cgroups.
  storm     500 clients log in at once to a paused instance; wall time until every one has its
            OK. 3 storms per build.
  kernel    sysbench oltp_point_select, 4 threads, 5 s, through each build's kernel route
            (route = "nftables", adopting one shared MariaDB), QPS. 3 runs per build; skipped
            without MariaDB, sysbench or nftables.

Each scenario first checks the work it claims: every login got its OK, each cold or frozen
login caused exactly one wake (or thaw) and no more, each storm had 500 successes and exactly
one wake, each kernel-route run had no connection pumped by the relay (the kernel carried them
all) and no sysbench error. A scenario whose work does not check out says so and counts as a
failure, whatever its times. Ratio = new / base of the medians, turned so that > 1 is always
worse (latency new/base, throughput base/new); more than 1.20 is flagged WORSE.

Writes bench/results/guard.{txt,json}; the last line is the verdict.
"""

import asyncio
import os
import resource
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

N = int(os.environ.get("GUARD_N", "20"))
WARMUP = 2
STORM_CLIENTS, STORM_RUNS = 500, 3
KERNEL_RUNS, KERNEL_SECS = 3, 5
WORSE = 1.20
HOST = "127.0.0.1"
BUILDS = {"new": h.BIN, "base": os.environ["GUARD_BASE_BIN"]}


def alternate(runs, fns):
    """Calls each of fns (a dict name → fn) `runs` times, rotating the order every round."""
    names = list(fns)
    for i in range(runs):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            fns[name](i)


def login_scenario(label, instance_toml, until):
    """Pause (to `until`) → lean login, per build; returns ({build: [ms]}, problems)."""
    relays = {b: h.Relay("guard-%s-%s" % (label, b), instance_toml=instance_toml, bin_dir=d)
              for b, d in BUILDS.items()}
    times = {b: [] for b in relays}
    problems = []

    def one(b):
        relay = relays[b]

        def f(i):
            relay.admin("POST", "/v1/instances/demo/resume")
            relay.wait_state("running")
            relay.pause(until=until)
            w0 = relay.metric("relay_wakes_total")
            dt, c = m.login(HOST, relay.port, h.USER, h.PASSWORD)
            c.close()
            wakes = relay.metric("relay_wakes_total") - w0
            if wakes != 1:
                problems.append("%s %s: login %d caused %d wakes, not 1" % (label, b, i, wakes))
            if i >= WARMUP:
                times[b].append(dt * 1000)
        return f

    try:
        alternate(N + WARMUP, {b: one(b) for b in relays})
    finally:
        for r in relays.values():
            r.stop()
    return times, problems


def storm_scenario():
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    relays = {b: h.Relay("guard-storm-%s" % b, nofile=nofile, bin_dir=d)
              for b, d in BUILDS.items()}
    walls = {b: [] for b in relays}
    problems = []

    async def storm(port):
        async def one():
            try:
                return await m.alogin(HOST, port, h.USER, h.PASSWORD, timeout=60)
            except Exception as e:  # noqa: BLE001 - counted below
                return e
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        out = await asyncio.gather(*[one() for _ in range(STORM_CLIENTS)])
        return loop.time() - t0, sum(isinstance(x, float) for x in out)

    def one(b):
        relay = relays[b]

        def f(i):
            relay.pause()
            w0 = relay.metric("relay_wakes_total")
            wall, ok = asyncio.run(storm(relay.port))
            wakes = relay.metric("relay_wakes_total") - w0
            if ok != STORM_CLIENTS or wakes != 1:
                problems.append("storm %s run %d: %d/%d logins OK, %d wakes (want all, 1)"
                                % (b, i, ok, STORM_CLIENTS, wakes))
            walls[b].append(wall * 1000)
        return f

    try:
        alternate(STORM_RUNS, {b: one(b) for b in relays})
    finally:
        for r in relays.values():
            r.stop()
    return walls, problems


def kernel_scenario():
    if os.geteuid() != 0 or not all(shutil.which(p) or os.path.exists("/usr/sbin/" + p)
                                    for p in ("mariadbd", "sysbench", "nft", "conntrack")):
        return None, ["kernel: skipped (needs root, mariadbd, sysbench, nft and conntrack)"]
    import forwarding as fw   # noqa: E402 - its MariaDB and sysbench helpers
    fw.SECS = KERNEL_SECS
    mdb, mport, _ = fw.start_mariadb()
    common = ["--tables=2", "--table-size=10000"]
    fw.prepare_sbtest(mport, common, threads=2)
    relays = {b: h.Relay("guard-kernel-%s" % b, compute_port=mport, driver="adopt",
                         auth="switch",
                         route="nftables", bin_dir=d) for b, d in BUILDS.items()}
    qps = {b: [] for b in relays}
    problems = []
    pumped = 'relay_direct_connections_total{instance="demo",outcome="forwarded"}'

    def one(b):
        relay = relays[b]

        def f(i):
            p0 = relay.metric(pumped)
            r = fw.sysbench("oltp_point_select", relay.port, 4, "sbtest", "sbpw", "sbtest",
                            common)
            through_relay = relay.metric(pumped) - p0
            if r["errors"] or through_relay:
                problems.append("kernel %s run %d: %d sysbench errors, %d connections pumped "
                                "by the relay (want 0, 0)" % (b, i, r["errors"], through_relay))
            qps[b].append(r["qps"])
        return f

    try:
        for r in relays.values():
            r.wait_state("running")
        alternate(KERNEL_RUNS, {b: one(b) for b in relays})
    finally:
        for r in relays.values():
            r.stop()
        h.stop(mdb, 60)
    return qps, problems


def cgroups_usable():
    return os.geteuid() == 0 and os.access("/sys/fs/cgroup", os.W_OK)


def main():
    base = "%s (%s)" % (os.environ.get("GUARD_BASE", "?"),
                        os.environ.get("GUARD_BASE_COMMIT", "?")[:12])
    out = ["# regression guard: this tree (new) against %s (base), alternated run by run" % base,
           "machine: %s" % h.machine(), ""]
    data = {"base": base, "scenarios": {}}
    scenarios = [
        ("cold", "stopped -> login OK", "ms", lambda: login_scenario("cold", "", "paused")),
        ("frozen", "frozen -> login OK", "ms",
         (lambda: login_scenario("frozen", 'stop_after = "1h"\n', "frozen"))
         if cgroups_usable() else None),
        ("storm", "%d logins at once, paused -> all OK" % STORM_CLIENTS, "ms", storm_scenario),
        ("kernel", "kernel-route sysbench oltp_point_select, 4 threads", "QPS", kernel_scenario),
    ]
    flagged, failed = [], []
    out.append("%-7s %-50s %12s %12s %7s  %s" % ("", "scenario", "new", "base", "ratio",
                                                   "verdict (ratio > 1 is worse)"))
    for key, what, unit, run in scenarios:
        if run is None:
            out.append("%-7s %-50s skipped (needs root and cgroups)" % (key, what))
            continue
        values, problems = run()
        if values is None:
            out.append("%-7s %-50s %s" % (key, what, "; ".join(problems)))
            continue
        s = {b: h.summary(v) for b, v in values.items()}
        new, old = s["new"]["median"], s["base"]["median"]
        ratio = new / old if unit != "QPS" else old / new
        verdict = "ok"
        if problems:
            verdict = "WORK NOT DONE"
            failed.append(key)
        elif ratio > WORSE:
            verdict = "WORSE (> %.0f %%)" % ((WORSE - 1) * 100)
            flagged.append(key)
        out.append("%-7s %-50s %9.2f %-2s %9.2f %-2s %7.3f  %s" % (
            key, what, new, unit[:2] if unit == "ms" else "", old, unit[:2] if unit == "ms"
            else "", ratio, verdict))
        for p in problems:
            out.append("        " + p)
        data["scenarios"][key] = {"what": what, "unit": unit, "samples": values, "summary": s,
                                  "ratio_worse_if_above_1": ratio, "problems": problems}
    out.append("")
    out.append("checked: every login OK, one wake per cold/frozen login and per storm, "
               "no kernel-route connection pumped, no sysbench error")
    if failed:
        out.append("guard: FAIL (work not done in %s)" % ", ".join(failed))
    elif flagged:
        out.append("guard: REGRESSION in %s (more than %.0f %% worse than base)"
                   % (", ".join(flagged), (WORSE - 1) * 100))
    else:
        out.append("guard: PASS (nothing more than %.0f %% worse than base)" % ((WORSE - 1) * 100))
    h.save("guard", "\n".join(out) + "\n", data)
    return 1 if failed or flagged else 0


if __name__ == "__main__":
    sys.exit(main())
