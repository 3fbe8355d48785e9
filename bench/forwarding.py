#!/usr/bin/env python3
"""Scenario 2, forwarding: sysbench through each contender, QPS and p95 latency.

Part A, MariaDB (a private mariadbd on a temporary datadir and a free port, run as root):
  direct        sysbench → mariadbd
  haproxy       sysbench → HAProxy (mode tcp) → mariadbd
  relay-direct  sysbench → relay (exec driver with start/stop/status = `true`: the relay adopts
                the running mariadbd, every connection takes the direct route) → mariadbd
  relay-held    sysbench → relay in auth-switch mode, instance paused when sysbench connects:
                every connection is held by the perceptron, switched once to the server's
                scramble and relayed (an exec driver adopts the same running mariadbd; its
                start command takes 1 s, so no connection can slip onto the direct route)
                → mariadbd
  relay-b       only when BENCH_RELAY_B names another relay binary: its direct route, to
                compare two builds in one run (BENCH_RELAY_B_ENV="K=V ..." adds environment,
                e.g. TOKIO_WORKER_THREADS=1)
  Workloads oltp_point_select and oltp_read_only at 4, 16 and 64 threads.

Part B, server-shim (its SQL engine cannot run the oltp_* schema, so the workload is
bench/lib/select1.lua: one `SELECT 1` per event):
  shim-direct   sysbench → server-shim
  relay-direct  sysbench → relay, instance running (direct route) → server-shim
  relay-held    sysbench → relay, instance paused when sysbench connects: every connection is
                held by the perceptron and relayed (the compute command sleeps 1 s before it
                starts, so no connection can slip onto the direct route) → server-shim
  at 4 and 16 threads.

Every cell alternates its contenders run by run (the order rotates), RUNS runs each;
reported: median QPS, median p95 latency (sysbench's per-event 95th percentile; for
oltp_read_only one event is a 14-query transaction), min/max spread, ratios, and for the
proxies their CPU time (user + system, all threads, from /proc) per query: on a machine whose
cores the load generator and the database share with the proxy, that cost is steadier than QPS.

Part K (`k`, not in the default run; `bench/kernel-route` runs it alone): the kernel route
(`route = "nftables"`) next to the pump, HAProxy and MariaDB directly; see part_k().

Part H (`h`, not in the default run; `bench/held-splice` runs it alone): held connections,
every one opened against a paused instance, on the relay's pump and spliced in the kernel,
next to HAProxy and MariaDB directly; see part_h().

Part R (`r`, with `h` in `bench/held-splice`): resumable sessions (`resumable_sessions = true`
on MariaDB with perceptron_dual), spliced below TCP and read from MariaDB when taken back;
see part_r().

With BENCH_HOSTS=3 (bench/forwarding --hosts 3, bench/held-splice --hosts 3,
bench/kernel-route --hosts 3), parts a, h and k run across three hosts made of network namespaces (bench/lib/harness.py, Hosts): sysbench on
this host, the relay and HAProxy on the relay's host, MariaDB on the compute's host; direct is
sysbench straight to MariaDB, routed through the relay's host.

Usage: forwarding.py [RUNS] [SECONDS] [a,b,k,h,r]   (defaults 3, 8, a,b)
Writes bench/results/forwarding.{txt,json}, or kernel-route.{txt,json} for part k alone,
held-splice.{txt,json} for parts h and r, held-splice-resumable.{txt,json} for part r alone;
with "-hosts" before the extension across three hosts.
"""

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

# BENCH_HOSTS=3: parts a, h and k across three hosts (h.Hosts) instead of loopback.
HOSTS = int(os.environ.get("BENCH_HOSTS", "1"))
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SECS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
THREADS = [4, 16, 64]
SHIM_THREADS = [4, 16]
WORKLOADS = ["oltp_point_select", "oltp_read_only"]
TABLES, TABLE_SIZE = 4, 10000
HERE = os.path.dirname(os.path.abspath(__file__))


def three_hosts():
    """With BENCH_HOSTS=3, three hosts (h.Hosts), else None; and where sysbench finds MariaDB
    straight (across hosts: routed through the relay's host) and where it finds the proxies."""
    hosts = h.Hosts() if HOSTS == 3 else None
    if hosts:
        return hosts, hosts.compute, hosts.relay
    return None, "127.0.0.1", "127.0.0.1"


HOSTS_NOTE = ("; three hosts (client, relay, compute in network namespaces joined by veth links; "
              "direct = straight to MariaDB routed through the relay's host)")


def start_mariadb(extra_args=(), hosts=None):
    """A private mariadbd with the sbtest account; extra_args go on its command line. With
    `hosts` (h.Hosts), on the compute's host, at its address, the account for any host."""
    d = h.tmpdir("mariadb")
    host = hosts.compute if hosts else "127.0.0.1"
    account = "'sbtest'@'%s'" % ("%" if hosts else "127.0.0.1")
    port = h.free_port()
    subprocess.run(["mariadb-install-db", "--no-defaults", "--datadir=" + d + "/data",
                    "--user=root", "--auth-root-authentication-method=normal",
                    "--skip-test-db"], check=True, capture_output=True)
    p = h.start((hosts.on_compute() if hosts else []) + [
                 "mariadbd", "--no-defaults", "--datadir=" + d + "/data", "--user=root",
                 "--port=%d" % port, "--bind-address=" + host, "--socket=" + d + "/sock",
                 "--pid-file=" + d + "/pid", "--max-connections=1000", "--skip-log-bin",
                 "--innodb-buffer-pool-size=256M", "--skip-name-resolve",
                 "--log-error=" + d + "/error.log", *extra_args], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
    m.wait_greeting(host, port, time.perf_counter() + 60, poll=0.05)
    sql = ("CREATE DATABASE sbtest; CREATE USER %s IDENTIFIED BY 'sbpw';"
           "GRANT ALL ON sbtest.* TO %s;" % (account, account))
    subprocess.run(["mariadb", "--no-defaults", "-uroot", "--socket=" + d + "/sock", "-e", sql],
                   check=True)
    return p, port, d


def mariadb_version(mdir):
    """The VERSION() of start_mariadb's server in `mdir` (over its socket)."""
    return subprocess.run(["mariadb", "--no-defaults", "-uroot", "--socket=" + mdir + "/sock",
                           "-Nse", "SELECT VERSION()"], capture_output=True,
                          text=True).stdout.strip()


def prepare_sbtest(port, common, threads=4, host="127.0.0.1"):
    """Creates sysbench's oltp tables (the same schema for every oltp_* workload) in the
    sbtest database of the MariaDB on `port`; `common` gives --tables and --table-size."""
    prep = subprocess.run(["sysbench", "oltp_read_only", "--db-driver=mysql",
                           "--mysql-host=" + host, "--mysql-port=%d" % port,
                           "--mysql-user=sbtest", "--mysql-password=sbpw", "--mysql-db=sbtest",
                           "--threads=%d" % threads] + common + ["prepare"],
                          capture_output=True, text=True)
    if prep.returncode != 0:
        raise RuntimeError(prep.stdout + prep.stderr)


def haproxy(port, backend, hosts=None):
    """HAProxy (mode tcp) on `port` to `backend`; with `hosts`, on the relay's host, from its
    client-side address to the compute's host."""
    d = h.tmpdir("haproxy")
    bind, server = (hosts.relay, hosts.compute) if hosts else ("127.0.0.1", "127.0.0.1")
    cfg = os.path.join(d, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write("global\n    maxconn 4000\ndefaults\n    mode tcp\n    timeout connect 5s\n"
                "    timeout client 1h\n    timeout server 1h\nfrontend fe\n"
                "    bind %s:%d\n    default_backend be\nbackend be\n"
                "    server s1 %s:%d\n" % (bind, port, server, backend))
    return h.start((hosts.on_relay() if hosts else []) + ["haproxy", "-db", "-f", cfg],
                   stdout=subprocess.DEVNULL,
                   stderr=open(os.path.join(d, "haproxy.log"), "w"))


def sysbench(test, port, threads, user, password, db, extra=(), proxy_pid=None,
             host="127.0.0.1"):
    cmd = ["sysbench", test, "--db-driver=mysql", "--mysql-host=" + host,
           "--mysql-port=%d" % port, "--mysql-user=" + user, "--mysql-password=" + password,
           "--mysql-db=" + db, "--threads=%d" % threads, "--time=%d" % SECS,
           "--percentile=95", "--report-interval=0"] + list(extra) + ["run"]
    cpu0 = h.cpu_seconds(proxy_pid) if proxy_pid else 0.0
    out = subprocess.run(cmd, capture_output=True, text=True)
    cpu = h.cpu_seconds(proxy_pid) - cpu0 if proxy_pid else None
    qps = re.search(r"queries:\s+(\d+)\s+\(([\d.]+) per sec", out.stdout)
    p95 = re.search(r"95th percentile:\s+([\d.]+)", out.stdout)
    errs = re.search(r"ignored errors:\s+(\d+)", out.stdout)
    if out.returncode != 0 or not qps:
        raise RuntimeError("sysbench failed (%s):\n%s\n%s" % (" ".join(cmd), out.stdout[-2000:],
                                                              out.stderr[-2000:]))
    return {"qps": float(qps.group(2)), "p95_ms": float(p95.group(1)),
            "errors": int(errs.group(1)) if errs else 0,
            "cpu_us_per_query": cpu * 1e6 / int(qps.group(1)) if cpu is not None else None}


def cell_runs(contenders, run_one):
    """contenders: list of names; run_one(name) -> result dict. Rotating order, RUNS each."""
    res = {c: [] for c in contenders}
    for i in range(RUNS):
        k = i % len(contenders)
        for c in contenders[k:] + contenders[:k]:
            res[c].append(run_one(c))
    return res


def summarise(res):
    return {c: {"qps": h.summary([r["qps"] for r in rs]),
                "p95_ms": h.summary([r["p95_ms"] for r in rs]),
                "cpu_us_per_query": h.summary([r["cpu_us_per_query"] for r in rs
                                               if r.get("cpu_us_per_query") is not None]),
                "errors": sum(r["errors"] for r in rs)} for c, rs in res.items()}


RELAYED = 'relay_connections_total{instance="demo",outcome="relayed"}'
DIRECT = "relay_direct_connections_total"


def held_run(relay, run):
    """Pauses the relay's instance, then run(): every connection it opens is held by the
    perceptron. Adds how many connections took each route, from the relay's metrics."""
    relay.pause()
    r0, d0 = relay.metric(RELAYED), relay.metric(DIRECT)
    r = run()
    r["relayed"] = relay.metric(RELAYED) - r0
    r["direct"] = relay.metric(DIRECT) - d0
    return r


def part_a(out, data):
    hosts, mhost, rhost = three_hosts()
    mdb, mport, mdir = start_mariadb(hosts=hosts)
    common = ["--tables=%d" % TABLES, "--table-size=%d" % TABLE_SIZE]
    prepare_sbtest(mport, common, host=mhost)
    hport = h.free_port()
    hap = haproxy(hport, mport, hosts)
    relay = h.Relay("fwd-mariadb", compute_port=mport, driver="adopt", auth="switch",
                    hosts=hosts)
    held = h.Relay("fwd-mariadb-held", compute_port=mport, auth="switch", driver=(
        '[instance.driver]\nkind = "exec"\nstart = ["sleep", "1"]\nstop = ["true"]\n'
        'status = ["true"]\npoll_interval = "1h"\n'), hosts=hosts)
    relays = [relay, held]
    ports = {"direct": mport, "haproxy": hport, "relay-direct": relay.port,
             "relay-held": held.port}
    pids = {"haproxy": hap.pid, "relay-direct": relay.proc.pid, "relay-held": held.proc.pid}
    b = h.relay_b_from_env()
    if b:
        relay_b = h.Relay("fwd-mariadb-b", compute_port=mport, driver="adopt",
                          auth="switch", binary=b[0], env=b[1], hosts=hosts)
        relays.append(relay_b)
        ports["relay-b"] = relay_b.port
        pids["relay-b"] = relay_b.proc.pid
        data["relay_b"] = {"binary": b[0], "env": b[1]}
    for r in relays:
        r.wait_state("running")
    m.wait_greeting(rhost, hport, time.perf_counter() + 10)

    def run_one(wl, t):
        def f(c):
            extra = common + ["--skip-trx=off"]
            if c != "relay-held":
                return sysbench(wl, ports[c], t, "sbtest", "sbpw", "sbtest", extra, pids.get(c),
                                mhost if c == "direct" else rhost)
            return held_run(held, lambda: sysbench(wl, held.port, t, "sbtest", "sbpw", "sbtest",
                                                   extra, held.proc.pid, rhost))
        return f

    versions = mariadb_version(mdir)
    data["mariadb_version"] = versions
    out.append("## Part A: MariaDB %s, %d tables x %d rows, %d s per run, %d runs per contender%s"
               % (versions, TABLES, TABLE_SIZE, SECS, RUNS, HOSTS_NOTE if hosts else ""))
    data["hosts"] = 3 if hosts else 1
    out.append("%-18s %3s  %-13s %11s %9s %9s %7s %9s %9s  %s" % (
        "workload", "thr", "contender", "QPS median", "QPS min", "QPS max", "p95 ms",
        "p95 max", "cpu us/q", "ratios (QPS; proxy CPU per query)"))
    for wl in WORKLOADS:
        for t in THREADS:
            res = cell_runs(list(ports), run_one(wl, t))
            s = summarise(res)
            data["mariadb"]["%s/%d" % (wl, t)] = {"runs": res, "summary": s}
            for c in ports:
                q = s[c]["qps"]
                cpu = s[c]["cpu_us_per_query"]
                ratio = ""
                if c in ("relay-direct", "relay-held", "relay-b"):
                    ratio = "relay/haproxy %.3f  relay/direct %.3f  cpu relay/haproxy %.3f" % (
                        q["median"] / s["haproxy"]["qps"]["median"],
                        q["median"] / s["direct"]["qps"]["median"],
                        cpu["median"] / s["haproxy"]["cpu_us_per_query"]["median"])
                    if c == "relay-held":
                        ratio += "  (routes per run: %s)" % ", ".join(
                            "%d relayed/%d direct" % (r["relayed"], r["direct"])
                            for r in res[c])
                elif c == "haproxy":
                    ratio = "haproxy/direct %.3f" % (q["median"] / s["direct"]["qps"]["median"])
                out.append("%-18s %3d  %-13s %11.0f %9.0f %9.0f %7.2f %9.2f %9s  %s%s" % (
                    wl, t, c, q["median"], q["min"], q["max"], s[c]["p95_ms"]["median"],
                    s[c]["p95_ms"]["max"], "%.1f" % cpu["median"] if cpu.get("n") else "-",
                    ratio, ("  errors %d" % s[c]["errors"]) if s[c]["errors"] else ""))
            print("\n".join(out[-len(ports):]), flush=True)
    for r in relays:
        r.stop()
    h.stop(hap)
    h.stop(mdb, 60)


def against_direct(out, into, ports, run_one, heading, note_of):
    """Every workload and thread count over `ports` (contender -> port; "direct" and
    "haproxy" among them): a table row per contender with its QPS / direct (and / HAProxy)
    and note_of(contender, runs), then each contender's geometric mean over the cells. Runs
    and summaries go into `into`."""
    out.append("%-18s %3s  %-13s %11s %9s %9s %7s %9s  %s" % (
        "workload", "thr", "contender", "QPS median", "QPS min", "QPS max", "p95 ms",
        "cpu us/q", heading))
    ratios = {c: [] for c in ports if c != "direct"}
    for wl in WORKLOADS:
        for t in THREADS:
            res = cell_runs(list(ports), run_one(wl, t))
            s = summarise(res)
            into["%s/%d" % (wl, t)] = {"runs": res, "summary": s}
            base = s["direct"]["qps"]["median"]
            for c in ports:
                q = s[c]["qps"]
                cpu = s[c]["cpu_us_per_query"]
                note = ""
                if c != "direct":
                    ratios[c].append(q["median"] / base)
                    note = "%.3f" % (q["median"] / base)
                    if c != "haproxy":
                        note += "  (/haproxy %.3f)" % (q["median"] / s["haproxy"]["qps"]["median"])
                    note += note_of(c, res[c])
                out.append("%-18s %3d  %-13s %11.0f %9.0f %9.0f %7.2f %9s  %s%s" % (
                    wl, t, c, q["median"], q["min"], q["max"], s[c]["p95_ms"]["median"],
                    "%.2f" % cpu["median"] if cpu.get("n") else "-", note,
                    ("  errors %d" % s[c]["errors"]) if s[c]["errors"] else ""))
            print("\n".join(out[-len(ports):]), flush=True)
    out.append("")
    out.append("geometric mean of QPS / direct over the %d cells:" % (len(WORKLOADS) * len(THREADS)))
    for c, rs in ratios.items():
        g = 1.0
        for x in rs:
            g *= x
        g **= 1.0 / len(rs)
        into["geomean/" + c] = g
        out.append("  %-13s %.3f  (min %.3f, max %.3f)" % (c, g, min(rs), max(rs)))


def part_k(out, data):
    """The kernel route next to the pump, HAProxy and MariaDB itself, in one run.

    direct        sysbench → mariadbd
    haproxy       sysbench → HAProxy (mode tcp) → mariadbd
    relay-pump    sysbench → relay, route = "pump" (the relay copies every byte) → mariadbd
    relay-kernel  sysbench → relay's listen address, route = "nftables": the kernel DNATs each
                  new connection to mariadbd; the relay sees no byte → mariadbd
    Both relays adopt the running mariadbd (exec driver, start/stop/status = `true`). Also
    reported: how long each renewal of the kernel route's lease took (the relay's
    relay_kernel_route_renewal_seconds).
    """
    hosts, mhost, rhost = three_hosts()
    mdb, mport, mdir = start_mariadb(hosts=hosts)
    common = ["--tables=%d" % TABLES, "--table-size=%d" % TABLE_SIZE]
    prepare_sbtest(mport, common, host=mhost)
    hport = h.free_port()
    hap = haproxy(hport, mport, hosts)
    pump = h.Relay("kr-pump", compute_port=mport, driver="adopt", auth="switch", hosts=hosts)
    kernel = h.Relay("kr-kernel", compute_port=mport, driver="adopt", auth="switch",
                     route="nftables", hosts=hosts)
    for r in (pump, kernel):
        r.wait_state("running")
    m.wait_greeting(rhost, hport, time.perf_counter() + 10)
    ports = {"direct": mport, "haproxy": hport, "relay-pump": pump.port,
             "relay-kernel": kernel.port}
    pids = {"haproxy": hap.pid, "relay-pump": pump.proc.pid, "relay-kernel": kernel.proc.pid}
    forwarded = 'relay_direct_connections_total{instance="demo",outcome="forwarded"}'

    def run_one(wl, t):
        def f(c):
            f0 = kernel.metric(forwarded)
            r = sysbench(wl, ports[c], t, "sbtest", "sbpw", "sbtest",
                         common + ["--skip-trx=off"], pids.get(c),
                         mhost if c == "direct" else rhost)
            if c == "relay-kernel":
                # Connections the relay pumped itself (none when the kernel routes them all).
                r["pumped"] = kernel.metric(forwarded) - f0
            return r
        return f

    version = mariadb_version(mdir)
    data["mariadb_version"] = version
    out.append("## Kernel route: MariaDB %s, %d tables x %d rows, %d s per run, %d runs per "
               "contender%s" % (version, TABLES, TABLE_SIZE, SECS, RUNS,
                                HOSTS_NOTE if hosts else ""))
    data["hosts"] = 3 if hosts else 1
    against_direct(out, data["kernel"], ports, run_one, "QPS / direct (and / haproxy)",
                   lambda c, runs: "  pumped %d" % sum(r["pumped"] for r in runs)
                   if c == "relay-kernel" else "")
    renewals = renewal_times(kernel)
    data["kernel"]["renewals"] = renewals
    out.append("")
    out.append("kernel route lease renewals: %d, mean %.1f ms, the slowest at most %s s "
               "(relay_kernel_route_renewal_seconds)"
               % (renewals["count"], renewals["mean_ms"], renewals["slowest_le"]))
    pump.stop()
    kernel.stop()
    h.stop(hap)
    h.stop(mdb, 60)


def renewal_times(relay):
    """How many lease renewals the relay's kernel route made, their mean time, and the upper
    bound of the slowest one's histogram bucket (relay_kernel_route_renewal_seconds)."""
    _, body = relay.admin("GET", "/metrics")
    count, total, slowest = 0, 0.0, "none"
    below = 0.0
    for line in body.splitlines():
        if not line.startswith("relay_kernel_route_renewal_seconds"):
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith("relay_kernel_route_renewal_seconds_count"):
            count = int(value)
        elif line.startswith("relay_kernel_route_renewal_seconds_sum"):
            total = value
        else:
            le = re.search(r'le="([^"]+)"', line).group(1)
            if value > below:
                slowest, below = le, value
    return {"count": count, "mean_ms": 1000 * total / count if count else 0.0,
            "slowest_le": slowest}


def spliced_sessions(relay, how=None):
    """How many closed sessions the relay has logged as spliced in the kernel (a held
    session is spliced once it has sent a few commands, docs/kernel-splice.md); with `how`,
    only those whose line also says it ("below_tcp=true")."""
    return sum("spliced=true" in l and "session closed" in l and (how is None or how in l)
               for l in relay.log_lines())


def spliced_since(relay, before, want):
    """Sessions spliced since `before`, once `want` of them have closed (their lines come
    when their tasks end, a moment after sysbench exits), or as many as after 10 s."""
    deadline = time.monotonic() + 10
    while spliced_sessions(relay) - before < want and time.monotonic() < deadline:
        time.sleep(0.05)
    return spliced_sessions(relay) - before


def part_h(out, data):
    """Held connections: every connection opened against a paused instance, so the
    perceptron relays each login and holds the connection for its life.

    direct        sysbench → mariadbd
    haproxy       sysbench → HAProxy (mode tcp) → mariadbd
    held-pump     sysbench → relay, held connections on the relay's pump
                  (kernel_splice = false) → mariadbd
    held-sockets  sysbench → relay, held connections spliced in the kernel through their
                  sockets (eBPF sockhash; splice_below_tcp = false) → mariadbd
    held-splice   sysbench → relay, held connections spliced below TCP (the default on
                  loopback: a TC program rewrites each segment, docs/kernel-splice.md)
                  → mariadbd
    Both relays are in auth-switch mode with an exec driver whose start takes 1 s (no
    connection can slip onto the direct route) and adopts the running mariadbd; each run
    starts paused. Every run checks that every connection was relayed, and for the splices
    that each was spliced, and how (the relay's log).
    """
    hosts, mhost, rhost = three_hosts()
    mdb, mport, mdir = start_mariadb(hosts=hosts)
    common = ["--tables=%d" % TABLES, "--table-size=%d" % TABLE_SIZE]
    prepare_sbtest(mport, common, host=mhost)
    hport = h.free_port()
    hap = haproxy(hport, mport, hosts)
    driver = ('[instance.driver]\nkind = "exec"\nstart = ["sleep", "1"]\nstop = ["true"]\n'
              'status = ["true"]\npoll_interval = "1h"\n')
    pump = h.Relay("held-pump", compute_port=mport, auth="switch", driver=driver,
                   instance_toml="kernel_splice = false\n", hosts=hosts)
    sockets = h.Relay("held-sockets", compute_port=mport, auth="switch", driver=driver,
                      instance_toml="splice_below_tcp = false\n", hosts=hosts)
    splice = h.Relay("held-splice", compute_port=mport, auth="switch", driver=driver,
                     hosts=hosts)
    for r in (pump, sockets, splice):
        r.wait_state("running")
    assert any("spliced in the kernel below TCP" in l for l in splice.log_lines()), \
        "the relay cannot splice below TCP here:\n" + "\n".join(splice.log_lines()[-5:])
    m.wait_greeting(rhost, hport, time.perf_counter() + 10)
    ports = {"direct": mport, "haproxy": hport, "held-pump": pump.port,
             "held-sockets": sockets.port, "held-splice": splice.port}
    relays = {"held-pump": pump, "held-sockets": sockets, "held-splice": splice}
    pids = {"haproxy": hap.pid, "held-pump": pump.proc.pid, "held-sockets": sockets.proc.pid,
            "held-splice": splice.proc.pid}
    below = {"held-pump": None, "held-sockets": "below_tcp=false", "held-splice": "below_tcp=true"}

    def run_one(wl, t):
        def f(c):
            extra = common + ["--skip-trx=off"]
            relay = relays.get(c)
            if relay is None:
                return sysbench(wl, ports[c], t, "sbtest", "sbpw", "sbtest", extra, pids.get(c),
                                mhost if c == "direct" else rhost)
            spliced0 = spliced_sessions(relay)
            how0 = spliced_sessions(relay, below[c])
            r = held_run(relay, lambda: sysbench(wl, relay.port, t, "sbtest", "sbpw", "sbtest",
                                                 extra, relay.proc.pid, rhost))
            want = r["relayed"] if below[c] else 0
            r["spliced"] = spliced_since(relay, spliced0, want)
            assert r["direct"] == 0 and r["relayed"] >= t, r
            assert r["spliced"] == want, r
            assert spliced_sessions(relay, below[c]) - how0 == want, (c, r)
            return r
        return f

    version = mariadb_version(mdir)
    data["mariadb_version"] = version
    out.append("## Held connections: MariaDB %s, %d tables x %d rows, %d s per run, %d runs per "
               "contender; every relay connection held (opened against a paused instance)%s"
               % (version, TABLES, TABLE_SIZE, SECS, RUNS, HOSTS_NOTE if hosts else ""))
    data["hosts"] = 3 if hosts else 1
    against_direct(out, data["held"], ports, run_one,
                   "QPS / direct (and / haproxy); connections relayed/spliced per run",
                   lambda c, runs: "  " + ", ".join("%d/%d" % (r["relayed"], r["spliced"])
                                                    for r in runs)
                   if c in relays else "")
    pump.stop()
    sockets.stop()
    splice.stop()
    h.stop(hap)
    h.stop(mdb, 60)


def part_r(out, data):
    """Resumable sessions: MariaDB with perceptron_dual issuing tickets, a dual-mode relay
    with `resumable_sessions = true` relaying every login (also while the instance runs),
    each session spliced below TCP once it has sent a few commands, and read from MariaDB
    whenever it is taken back (docs/kernel-splice.md, *Resumable sessions*).

    direct          sysbench → mariadbd
    haproxy         sysbench → HAProxy (mode tcp) → mariadbd
    held-resumable  sysbench → relay → mariadbd
    sysbench sends text queries (--db-ps-mode=disable): a resumable session that prepares
    statements stays on the pump, where the relay learns them. Every run checks that every
    connection was relayed and spliced (the relay's log).
    """
    relay = h.dual_mariadb_relay("held-resumable", instance_toml='stop_after = "1h"\n')
    mport = relay.compute_port
    subprocess.run(["mariadb", "-h127.0.0.1", "-P%d" % mport, "-uroot", "-e",
                    "CREATE DATABASE sbtest; CREATE USER 'sbtest'@'127.0.0.1' IDENTIFIED VIA "
                    "perceptron_dual USING PASSWORD('sbpw'); "
                    "GRANT ALL ON sbtest.* TO 'sbtest'@'127.0.0.1';"], check=True)
    common = ["--tables=%d" % TABLES, "--table-size=%d" % TABLE_SIZE, "--db-ps-mode=disable"]
    prepare_sbtest(mport, common)
    hport = h.free_port()
    hap = haproxy(hport, mport)
    m.wait_greeting("127.0.0.1", hport, time.perf_counter() + 10)
    ports = {"direct": mport, "haproxy": hport, "held-resumable": relay.port}
    pids = {"haproxy": hap.pid, "held-resumable": relay.proc.pid}

    def run_one(wl, t):
        def f(c):
            extra = common + ["--skip-trx=off"]
            if c != "held-resumable":
                return sysbench(wl, ports[c], t, "sbtest", "sbpw", "sbtest", extra, pids.get(c))
            spliced0 = spliced_sessions(relay)
            r0 = relay.metric(RELAYED)
            r = sysbench(wl, relay.port, t, "sbtest", "sbpw", "sbtest", extra, relay.proc.pid)
            r["relayed"] = relay.metric(RELAYED) - r0
            r["spliced"] = spliced_since(relay, spliced0, r["relayed"])
            assert r["relayed"] >= t and r["spliced"] == r["relayed"], r
            return r
        return f

    out.append("")
    out.append("## Resumable sessions: MariaDB %s with perceptron_dual and metadata_lock_info, "
               "the same tables, text queries; every relay connection relayed, ticketed and "
               "spliced below TCP" % h.mariadbd_version())
    against_direct(out, data["resumable"], ports, run_one,
                   "QPS / direct (and / haproxy); connections relayed/spliced per run",
                   lambda c, runs: "  " + ", ".join("%d/%d" % (r["relayed"], r["spliced"])
                                                    for r in runs)
                   if c == "held-resumable" else "")
    relay.stop()
    h.stop(hap)


def part_b(out, data):
    # The relay's compute command sleeps 1 s before exec'ing server-shim, so during a wake
    # every sysbench connection is held by the perceptron (none can reach the direct route).
    cport = h.free_port()
    shim = " ".join(h.Relay.shim_cmd(cport, "{DIR}/data", "{DIR}/perceptron.key"))
    drv = ('[instance.driver]\nkind = "process"\ncommand = ["sh", "-c", "sleep 1; exec %s"]\n'
           'stop_grace = "5s"\n' % shim)
    relay = h.Relay("fwd-shim", compute_port=cport, driver=drv)
    h.add_user(os.path.join(relay.dir, "data"))
    user, pw = h.USER.decode(), h.PASSWORD.decode()
    lua = os.path.join(HERE, "lib", "select1.lua")

    def run_one(t):
        def f(c):
            if c == "relay-held":
                return held_run(relay, lambda: sysbench(lua, relay.port, t, user, pw, "",
                                                        ["--mysql-db="]))
            if relay.state() != "running":
                relay.admin("POST", "/v1/instances/demo/resume")
                relay.wait_state("running")
            return sysbench(lua, relay.port if c == "relay-direct" else cport, t, user, pw, "",
                            ["--mysql-db="])
        return f

    out += ["", "## Part B: server-shim, workload select1.lua (one `SELECT 1` per event), "
            "%d s per run, %d runs per contender" % (SECS, RUNS)]
    out.append("%-3s  %-13s %11s %9s %9s %7s %9s  %s" % (
        "thr", "contender", "QPS median", "QPS min", "QPS max", "p95 ms", "p95 max", "notes"))
    contenders = ["shim-direct", "relay-direct", "relay-held"]
    for t in SHIM_THREADS:
        res = cell_runs(contenders, run_one(t))
        s = summarise(res)
        data["shim"]["select1/%d" % t] = {"runs": res, "summary": s}
        for c in contenders:
            q = s[c]["qps"]
            note = ""
            if c == "relay-held":
                note = "held/relay-direct %.3f  held/shim-direct %.3f  (routes per run: %s)" % (
                    q["median"] / s["relay-direct"]["qps"]["median"],
                    q["median"] / s["shim-direct"]["qps"]["median"],
                    ["%d relayed/%d direct" % (r["relayed"], r["direct"]) for r in res[c]])
            elif c == "relay-direct":
                note = "relay-direct/shim-direct %.3f" % (
                    q["median"] / s["shim-direct"]["qps"]["median"])
            out.append("%-3d  %-13s %11.0f %9.0f %9.0f %7.2f %9.2f  %s" % (
                t, c, q["median"], q["min"], q["max"], s[c]["p95_ms"]["median"],
                s[c]["p95_ms"]["max"], note))
        print("\n".join(out[-3:]), flush=True)
    relay.stop()


def main():
    parts = sys.argv[3].split(",") if len(sys.argv) > 3 else ["a", "b"]
    out = ["# forwarding (sysbench %s)" % subprocess.run(
        ["sysbench", "--version"], capture_output=True, text=True).stdout.strip(),
        "machine: %s" % h.machine(), ""]
    data = {"runs": RUNS, "seconds": SECS, "mariadb": {}, "shim": {}, "kernel": {}, "held": {},
            "resumable": {}}
    if "k" in parts:
        part_k(out, data)
    if "h" in parts:
        part_h(out, data)
    if "r" in parts:
        part_r(out, data)
    if "a" in parts:
        part_a(out, data)
    if "b" in parts:
        part_b(out, data)
    out.append("")
    alone = {"k": "kernel-route", "h": "held-splice", "h,r": "held-splice",
             "r": "held-splice-resumable"}
    name = alone.get(",".join(parts), "forwarding")
    h.save(name + ("-hosts" if HOSTS == 3 else ""), "\n".join(out), data)


if __name__ == "__main__":
    main()
