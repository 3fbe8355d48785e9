#!/usr/bin/env python3
"""Scenario 7, compute capacity.

Part A, resume latency (alternated run by run, n each): a login to an instance whose last
pause stopped its compute, next to one whose pause froze it (stop_after set: cgroup freezer),
for server-shim (dual mode) and a stock mariadbd (switch mode).
  shim-stopped / shim-frozen / maria-stopped / maria-frozen: pause → login OK, ms.
Part B, throughput at a fixed capacity: sysbench oltp_point_select, 4 threads, through the
relay's direct route to mariadbd whose cgroup has min = max = 0.5, 1 and 2 CCU, and to one
without [instance.capacity]; QPS, and the cores mariadbd used (the quota at work even where
sysbench and the relay share the machine's two cores with it).

Usage: capacity.py [N] [SECS]   (default 20 logins each, 10 s per sysbench run)
Writes bench/results/capacity.{txt,json}. Needs root and cgroups.
"""

import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
SECS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
WARMUP = 2


def install(tmp, name):
    datadir = os.path.join(tmp, name)
    subprocess.run(["mariadb-install-db", "--no-defaults", "--datadir=" + datadir, "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True)
    return datadir


def mariadbd_driver(datadir, port):
    cmd = ["/usr/sbin/mariadbd", "--no-defaults", "--user=root", "--datadir=" + datadir,
           "--socket=" + os.path.join(datadir, "mysqld.sock"), "--port=%d" % port,
           "--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin",
           "--tmpdir=" + datadir, "--innodb-buffer-pool-size=64M"]
    return ('[instance.driver]\nkind = "process"\ncommand = [%s]\nstop_grace = "30s"\n'
            % ", ".join(json.dumps(a) for a in cmd))


def maria_relay(tmp, name, instance_toml=""):
    port = h.free_port()
    return h.Relay(name, compute_port=port, auth="switch",
                   driver=mariadbd_driver(install(tmp, name), port),
                   instance_toml=instance_toml)


def part_a(tmp):
    frozen = 'stop_after = "1h"\n'
    relays = {
        "shim-stopped": (h.Relay("cap-shim-stopped"), "paused", h.USER, h.PASSWORD),
        "shim-frozen": (h.Relay("cap-shim-frozen", instance_toml=frozen), "frozen",
                        h.USER, h.PASSWORD),
        "maria-stopped": (maria_relay(tmp, "cap-maria-stopped"), "paused", b"root", b""),
        "maria-frozen": (maria_relay(tmp, "cap-maria-frozen", frozen), "frozen", b"root", b""),
    }
    times = {k: [] for k in relays}
    try:
        for i in range(N + WARMUP):
            order = list(relays)
            order = order[i % 4:] + order[:i % 4]
            for name in order:
                relay, until, user, pw = relays[name]
                relay.admin("POST", "/v1/instances/demo/resume")
                relay.wait_state("running")
                relay.pause(until=until)
                dt, c = m.login("127.0.0.1", relay.port, user, pw)
                c.close()
                if i >= WARMUP:
                    times[name].append(dt * 1000)
    finally:
        for relay, *_ in relays.values():
            relay.stop()
    return times


def compute_cpu_seconds(relay):
    """utime + stime of the relay's compute (its pid file), in seconds."""
    pid = None
    with open(os.path.join(relay.dir, "state", "pids", "demo.pid")) as f:
        for line in f:
            if line.startswith("pid "):
                pid = int(line.split()[1])
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sysbench_qps(port, relay):
    common = ["--db-driver=mysql", "--mysql-host=127.0.0.1", "--mysql-port=%d" % port,
              "--mysql-user=root", "--mysql-password=", "--mysql-db=sbtest", "--tables=4",
              "--table-size=10000", "--threads=4"]
    prep = subprocess.run(["sysbench", "oltp_point_select"] + common + ["prepare"],
                          capture_output=True, text=True)
    if prep.returncode != 0:
        raise RuntimeError(prep.stdout + prep.stderr)
    cpu0, t0 = compute_cpu_seconds(relay), time.monotonic()
    out = subprocess.run(["sysbench", "oltp_point_select"] + common +
                         ["--time=%d" % SECS, "--report-interval=0", "run"],
                         capture_output=True, text=True)
    cores = (compute_cpu_seconds(relay) - cpu0) / (time.monotonic() - t0)
    qps = re.search(r"queries:\s+(\d+)\s+\(([\d.]+) per sec", out.stdout)
    if out.returncode != 0 or not qps:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    return float(qps.group(2)), cores


def part_b(tmp):
    qps, cores = {}, {}
    for ccu in ("0.5", "1", "2", None):
        toml = ("capacity = { min_ccu = %s, max_ccu = %s }\n" % (ccu, ccu)) if ccu else ""
        name = "cap-sb-%s" % (ccu or "unlimited")
        relay = maria_relay(tmp, name, toml)
        try:
            relay.admin("POST", "/v1/instances/demo/resume")
            relay.wait_state("running")
            _, c = m.login("127.0.0.1", relay.port, b"root", b"")
            c.query(b"CREATE DATABASE sbtest")
            c.close()
            qps[ccu or "unlimited"], cores[ccu or "unlimited"] = sysbench_qps(relay.port, relay)
        finally:
            relay.stop()
    return qps, cores


def main():
    tmp = h.tmpdir("capacity")
    try:
        times = part_a(tmp)
        qps, cores = part_b(tmp)
    finally:
        h.stop_all()
    lines = ["Compute capacity (n=%d logins each; ms; sysbench %d s per capacity)" % (N, SECS),
             "machine: %s" % h.machine(), "", "Part A: pause → login OK"]
    for k, xs in times.items():
        lines.append("%-14s %s" % (k, h.fmt(h.summary(xs), digits=2)))
    med = {k: h.summary(xs)["median"] for k, xs in times.items()}
    lines += ["",
              "shim: frozen / stopped median ratio %.2fx" % (med["shim-frozen"] / med["shim-stopped"]),
              "mariadb: frozen / stopped median ratio %.3fx (%.1f ms vs %.1f ms)"
              % (med["maria-frozen"] / med["maria-stopped"], med["maria-frozen"],
                 med["maria-stopped"]),
              "", "Part B: oltp_point_select, 4 threads, direct route to mariadbd;",
              "mariadbd's CPU use during the run (utime+stime / wall) in cores"]
    base = qps.get("unlimited")
    for k, v in qps.items():
        lines.append("%-10s %10.0f QPS%s  mariadbd %.2f cores"
                     % (k + (" CCU" if k != "unlimited" else ""), v,
                        "  (%.2fx unlimited)" % (v / base) if base else "", cores[k]))
    text = "\n".join(lines)
    print(text)
    h.save("capacity", text, {"logins_ms": times, "qps": qps, "compute_cores": cores})


if __name__ == "__main__":
    main()
