"""bench/tls-forwarding: see the shell wrapper. Reuses forwarding.py's plumbing."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, HERE)
import forwarding as f  # noqa: E402
import harness as h  # noqa: E402

THREADS = [4, 16]
WORKLOADS = ["oltp_point_select", "oltp_read_only"]


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1 and a client pair: sysbench's --mysql-ssl reads
    cacert.pem, client-cert.pem and client-key.pem from its working directory."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca-key.pem", "-out", "cacert.pem", "-days", "2",
            "-subj", "/CN=bench CA")
    with open(os.path.join(d, "server.ext"), "w") as fh:
        fh.write("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        openssl("req", *ec, "-keyout", name + "-key.pem", "-out", name + ".csr", "-subj", "/CN=" + name)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "cacert.pem", "-CAkey", "ca-key.pem",
                "-CAcreateserial", "-out", name + "-cert.pem", "-days", "2",
                *(["-extfile", "server.ext"] if name == "server" else []))
        os.chmod(os.path.join(d, name + "-key.pem"), 0o600)


def main():
    pki = h.tmpdir("tls-pki")
    make_pki(pki)
    mdb, mport, _ = f.start_mariadb([
        "--ssl-ca=" + pki + "/cacert.pem", "--ssl-cert=" + pki + "/server-cert.pem",
        "--ssl-key=" + pki + "/server-key.pem"])
    common = ["--tables=%d" % f.TABLES, "--table-size=%d" % f.TABLE_SIZE]
    f.prepare_sbtest(mport, common)
    held_driver = ('[instance.driver]\nkind = "exec"\nstart = ["sleep", "1"]\nstop = ["true"]\n'
                   'status = ["true"]\npoll_interval = "1h"\n')
    tls_toml = '[instance.tls]\ncert = "%s/server-cert.pem"\nkey = "%s/server-key.pem"\n' % (pki, pki)
    held = h.Relay("tls-held-plain", compute_port=mport, auth="switch", driver=held_driver)
    held_tls = h.Relay("tls-held", compute_port=mport, auth="switch", driver=held_driver,
                       instance_toml=tls_toml)
    relays = {"relay-held": held, "relay-held-tls": held_tls}
    for r in relays.values():
        r.wait_state("running")
    contenders = ["direct", "direct-tls", "relay-held", "relay-held-tls"]
    # sysbench reads its TLS files from its working directory.
    os.chdir(pki)
    out = ["# TLS forwarding (sysbench %s)" % subprocess.run(
        ["sysbench", "--version"], capture_output=True, text=True).stdout.strip(),
        "machine: %s" % h.machine(), "",
        "%d tables x %d rows, %d s per run, %d runs per contender; MariaDB terminates TLS on "
        "direct-tls, the relay on relay-held-tls (compute leg plaintext)" % (
            f.TABLES, f.TABLE_SIZE, f.SECS, f.RUNS),
        "%-18s %3s  %-15s %11s %9s %9s %7s %9s  %s" % (
            "workload", "thr", "contender", "QPS median", "QPS min", "QPS max", "p95 ms",
            "cpu us/q", "ratios")]
    data = {"runs": f.RUNS, "seconds": f.SECS, "cells": {}}

    def run_one(wl, t):
        def one(c):
            extra = common + ["--skip-trx=off"] + (["--mysql-ssl=on"] if c.endswith("tls") else [])
            if c.startswith("direct"):
                return f.sysbench(wl, mport, t, "sbtest", "sbpw", "sbtest", extra)
            r = relays[c]
            return f.held_run(r, lambda: f.sysbench(wl, r.port, t, "sbtest", "sbpw", "sbtest",
                                                    extra, r.proc.pid))
        return one

    for wl in WORKLOADS:
        for t in THREADS:
            res = f.cell_runs(contenders, run_one(wl, t))
            s = f.summarise(res)
            data["cells"]["%s/%d" % (wl, t)] = {"runs": res, "summary": s}
            for c in contenders:
                q, cpu = s[c]["qps"], s[c]["cpu_us_per_query"]
                ratio = ""
                if c == "direct-tls":
                    ratio = "tls/plain %.3f" % (q["median"] / s["direct"]["qps"]["median"])
                elif c == "relay-held-tls":
                    ratio = "vs MariaDB TLS %.3f  tls/plain held %.3f  cpu tls/plain %.2f  (%s)" % (
                        q["median"] / s["direct-tls"]["qps"]["median"],
                        q["median"] / s["relay-held"]["qps"]["median"],
                        cpu["median"] / s["relay-held"]["cpu_us_per_query"]["median"],
                        ", ".join("%d relayed/%d direct" % (r["relayed"], r["direct"])
                                  for r in res[c]))
                out.append("%-18s %3d  %-15s %11.0f %9.0f %9.0f %7.2f %9s  %s%s" % (
                    wl, t, c, q["median"], q["min"], q["max"], s[c]["p95_ms"]["median"],
                    "%.1f" % cpu["median"] if cpu.get("n") else "-", ratio,
                    ("  errors %d" % s[c]["errors"]) if s[c]["errors"] else ""))
            print("\n".join(out[-len(contenders):]), flush=True)
    for r in relays.values():
        r.stop()
    h.stop(mdb, 60)
    out.append("")
    os.chdir(h.ROOT if hasattr(h, "ROOT") else HERE)
    h.save("tls-forwarding", "\n".join(out), data)


if __name__ == "__main__":
    main()
