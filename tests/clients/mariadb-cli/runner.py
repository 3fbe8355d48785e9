#!/usr/bin/env python3
"""Client-matrix runner for the `mariadb` command-line client (tests/tests/client_matrix.rs,
docs/clients.md). A thin wrapper: it runs the real CLI in batch mode (`-N -B --skip-ssl`) and
turns its output into the runners' JSON line.

    python3 runner.py --port P --user U --password PW [--database DB] [--host H]
                      --mode query|prepared|wrongpw

Prints {client, mode, ok, rows, error_code, error} and exits 0, also when the server refused.
The CLI has no client-side prepared-statement API: `prepared` reports `na`.
"""
import argparse
import json
import os
import re
import subprocess
import sys


def scaled(seconds):
    """`seconds` stretched by $PERCEPTRON_TEST_SLOWDOWN, as the harness's deadlines are."""
    return int(seconds * float(os.environ.get("PERCEPTRON_TEST_SLOWDOWN", "1")))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", default="")
    p.add_argument("--database", default="")
    p.add_argument("--mode", choices=["query", "prepared", "wrongpw"], default="query")
    # TLS with full verification (--ssl --ssl-verify-server-cert --ssl-ca) instead of --skip-ssl.
    p.add_argument("--ssl-ca", default="")
    a = p.parse_args()
    out = {"client": "mariadb-cli", "mode": a.mode, "ok": False, "rows": [], "error_code": None,
           "error": None}
    if a.mode == "prepared":
        out.update(na=True, error="n/a: the mariadb CLI has no prepared-statement API")
        print(json.dumps(out))
        return
    sql = "SELECT USER(); SELECT 1+1" if a.mode == "query" else "SELECT 1"
    tls = (["--ssl", "--ssl-verify-server-cert", f"--ssl-ca={a.ssl_ca}"] if a.ssl_ca
           else ["--skip-ssl"])
    cmd = ["mariadb", f"-h{a.host}", f"-P{a.port}", f"-u{a.user}", f"--password={a.password}",
           *tls, "-N", "-B", f"--connect-timeout={scaled(20)}"]
    if a.database:
        cmd.append(f"-D{a.database}")
    cmd += ["-e", sql]
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=scaled(60))
    except (OSError, subprocess.TimeoutExpired) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    else:
        if r.returncode == 0:
            out["ok"] = True
            out["rows"] = [[None if v == "NULL" else v for v in line.split("\t")]
                           for line in r.stdout.splitlines()]
        else:
            m = re.search(r"ERROR (\d+)", r.stderr)
            out["error_code"] = int(m.group(1)) if m else None
            out["error"] = r.stderr.strip() or f"exit code {r.returncode}"
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
