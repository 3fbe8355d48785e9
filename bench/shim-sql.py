#!/usr/bin/env python3
"""Scenario 5, server-shim as a SQL engine: sysbench OLTP on the shim next to
MariaDB in the same run, and the shim's start-up time over 100,000 rows.

  mariadb   sysbench → mariadbd (InnoDB, 256 MB buffer pool)
  shim      sysbench → server-shim (SQLite, WAL, synchronous=FULL)

Both get the same sysbench prepare (4 tables x 25,000 rows = 100,000 rows), then
oltp_point_select and oltp_read_write at 4 threads, RUNS runs of SECONDS each, contenders
alternated run by run. Reported: median QPS (min/max), median p95 latency, errors, and the
shim/MariaDB QPS ratio. Start-up: exec -> first MySQL greeting on the port, with the 100,000
rows in the data directory, after a clean stop (SIGTERM) and after kill -9, and the first
query answered after each (a point select over a fresh connection).

Usage: shim-sql.py [RUNS] [SECONDS] [STARTS]   (defaults 3, 10, 10)
Writes bench/results/shim-sql.{txt,json}.
"""

import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
ARGS = sys.argv[1:]
# forwarding.py reads its own arguments at import; it is imported for its MariaDB and
# sysbench helpers only.
sys.argv = sys.argv[:1]
sys.path.insert(0, HERE)
import forwarding as fwd  # noqa: E402
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

RUNS = int(ARGS[0]) if len(ARGS) > 0 else 3
SECS = int(ARGS[1]) if len(ARGS) > 1 else 10
STARTS = int(ARGS[2]) if len(ARGS) > 2 else 10
fwd.SECS = SECS
WORKLOADS = ["oltp_point_select", "oltp_read_write"]
THREADS = 4
TABLES, TABLE_SIZE = 4, 25000


def start_shim(data, port):
    p = h.start([os.path.join(h.BIN, "server-shim"), "run", "--listen", "127.0.0.1:%d" % port,
                 "--data", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.perf_counter()
    ready = m.wait_greeting("127.0.0.1", port, t0 + 30)
    return p, ready - t0


def prepare(port, user, password):
    common = ["sysbench", "oltp_read_write", "--db-driver=mysql", "--mysql-host=127.0.0.1",
              "--mysql-port=%d" % port, "--mysql-user=" + user, "--mysql-password=" + password,
              "--mysql-db=sbtest", "--mysql-ssl=off", "--threads=4",
              "--tables=%d" % TABLES, "--table-size=%d" % TABLE_SIZE]
    t0 = time.perf_counter()
    out = subprocess.run(common + ["prepare"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    return time.perf_counter() - t0


def first_query_ms(port):
    """A fresh connection and one point select, timed from the connect."""
    t0 = time.perf_counter()
    out = subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", "-P%d" % port,
                          "-u" + h.USER.decode(), "-p" + h.PASSWORD.decode(), "--skip-ssl",
                          "-N", "-B", "sbtest", "-e", "SELECT c FROM sbtest1 WHERE id = 4242"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return (time.perf_counter() - t0) * 1e3


def startup(data, port):
    """Starts keyed by how the previous run ended (the first follows a clean stop)."""
    res = {"clean": [], "kill9": [], "first_query_clean": [], "first_query_kill9": []}
    after = "clean"
    for i in range(STARTS):
        p, secs = start_shim(data, port)
        res[after].append(secs * 1e3)
        res["first_query_" + after].append(first_query_ms(port))
        if i % 2 == 0:
            p.send_signal(signal.SIGKILL)
            p.wait()
            after = "kill9"
        else:
            h.stop(p)
            after = "clean"
    return res


def main():
    mdb, mport, _ = fwd.start_mariadb()
    data = h.tmpdir("shim-sql")
    h.add_user(data)
    sport = h.free_port()
    shim, _ = start_shim(data, sport)
    subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", "-P%d" % sport,
                    "-u" + h.USER.decode(), "-p" + h.PASSWORD.decode(), "--skip-ssl",
                    "-e", "CREATE DATABASE sbtest"], check=True)
    creds = {"mariadb": (mport, "sbtest", "sbpw"),
             "shim": (sport, h.USER.decode(), h.PASSWORD.decode())}
    prep = {c: prepare(*creds[c]) for c in creds}
    out = ["# server-shim as a SQL engine (sysbench %s)" % subprocess.run(
        ["sysbench", "--version"], capture_output=True, text=True).stdout.strip(),
        "machine: %s" % h.machine(), "",
        "## sysbench, %d tables x %d rows, %d threads, %d runs x %d s per contender"
        % (TABLES, TABLE_SIZE, THREADS, RUNS, SECS),
        "prepare (create + load 100,000 rows): mariadb %.1f s, shim %.1f s"
        % (prep["mariadb"], prep["shim"]),
        "%-18s %-8s %10s %9s %9s %8s %7s  %s" % ("workload", "engine", "QPS median", "QPS min",
                                                "QPS max", "p95 ms", "errors", "ratio")]
    data_out = {"runs": RUNS, "seconds": SECS, "prepare_s": prep, "sysbench": {}}
    for wl in WORKLOADS:
        res = fwd.cell_runs(list(creds), lambda c, wl=wl: fwd.sysbench(
            wl, creds[c][0], THREADS, creds[c][1], creds[c][2], "sbtest",
            # The tables prepared: without these sysbench runs on its defaults, the first
            # 10,000 rows of one table (as this benchmark did until 2026-12-08).
            ["--mysql-ssl=off", "--tables=%d" % TABLES, "--table-size=%d" % TABLE_SIZE]))
        s = fwd.summarise(res)
        data_out["sysbench"][wl] = s
        for c in creds:
            q = s[c]["qps"]
            ratio = ("shim/mariadb %.3f" % (q["median"] / s["mariadb"]["qps"]["median"])
                     if c == "shim" else "")
            out.append("%-18s %-8s %10.0f %9.0f %9.0f %8.2f %7d  %s" % (
                wl, c, q["median"], q["min"], q["max"], s[c]["p95_ms"]["median"],
                s[c]["errors"], ratio))
    h.stop(shim)
    h.stop(mdb)
    st = startup(data, sport)
    data_out["startup_ms"] = {k: h.summary(v) for k, v in st.items()}
    out += ["", "## start-up over %d rows (exec -> first greeting; %d starts, each after a "
            "clean stop or a kill -9 of the previous one)" % (TABLES * TABLE_SIZE, STARTS)]
    for k in ["clean", "kill9", "first_query_clean", "first_query_kill9"]:
        out.append("%-20s %s" % (k, h.fmt(h.summary(st[k]))))
    out.append("")
    h.save("shim-sql", "\n".join(out), data_out)


if __name__ == "__main__":
    try:
        main()
    finally:
        h.stop_all()
