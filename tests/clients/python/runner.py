#!/usr/bin/env python3
"""Client-matrix runner for the Python drivers (tests/tests/client_matrix.rs, docs/clients.md).

    python3 runner.py --driver pymysql|mysql-connector --port P --user U --password PW
                      [--database DB] [--host H] --mode query|prepared|wrongpw

Prints one JSON line {client, mode, ok, rows, error_code, error} and exits 0, also when the
server refused: the test asserts on the JSON. With --ssl-ca CA both drivers use TLS and verify
the server's chain and name. Without it TLS is off: PyMySQL only uses TLS when given `ssl`
options; mysql-connector-python gets `ssl_disabled=True`, and runs its pure-Python protocol
(`use_pure=True`). PyMySQL has no server-side prepared statements: `prepared` reports `na`.
"""
import argparse
import json
import os
import sys


def cell(v):
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "replace")
    return str(v)


def scaled(seconds):
    """`seconds` stretched by $PERCEPTRON_TEST_SLOWDOWN, as the harness's deadlines are."""
    return int(seconds * float(os.environ.get("PERCEPTRON_TEST_SLOWDOWN", "1")))


def connect(a):
    if a.driver == "pymysql":
        import pymysql

        # With a CA PyMySQL verifies the chain and the host name.
        return pymysql.connect(
            host=a.host, port=a.port, user=a.user, password=a.password,
            database=a.database or None, connect_timeout=scaled(60),
            ssl={"ca": a.ssl_ca} if a.ssl_ca else None,
        )
    import mysql.connector

    tls = (dict(ssl_ca=a.ssl_ca, ssl_verify_cert=True, ssl_verify_identity=True)
           if a.ssl_ca else dict(ssl_disabled=True))
    return mysql.connector.connect(
        host=a.host, port=a.port, user=a.user, password=a.password,
        database=a.database or None, use_pure=True, connection_timeout=scaled(20), **tls,
    )


def error_code(e):
    code = getattr(e, "errno", None)  # mysql-connector-python
    if code is None and e.args and isinstance(e.args[0], int):  # PyMySQL: (code, message)
        code = e.args[0]
    return code if isinstance(code, int) and code > 0 else None


def run(a):
    rows = []
    conn = connect(a)
    try:
        if a.mode == "query":
            cur = conn.cursor()
            for sql in ("SELECT USER()", "SELECT 1+1"):
                cur.execute(sql)
                rows += [[cell(v) for v in r] for r in cur.fetchall()]
        elif a.mode == "prepared":
            # cursor(prepared=True): COM_STMT_PREPARE + COM_STMT_EXECUTE with bound values.
            cur = conn.cursor(prepared=True)
            for sql, params in (("SELECT ? + 1", (41,)), ("SELECT CONCAT(?, '!')", ("hi",))):
                cur.execute(sql, params)
                rows += [[cell(v) for v in r] for r in cur.fetchall()]
        else:
            cur = conn.cursor()
            cur.execute("SELECT 1")
            rows += [[cell(v) for v in r] for r in cur.fetchall()]
    finally:
        conn.close()
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--driver", required=True, choices=["pymysql", "mysql-connector"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", default="")
    p.add_argument("--database", default="")
    p.add_argument("--mode", choices=["query", "prepared", "wrongpw"], default="query")
    p.add_argument("--ssl-ca", default="")  # TLS, chain and host name verified
    a = p.parse_args()
    out = {"client": a.driver, "mode": a.mode, "ok": False, "rows": [], "error_code": None,
           "error": None}
    if a.mode == "prepared" and a.driver == "pymysql":
        out.update(na=True, error="n/a: PyMySQL has no server-side prepared statements")
    else:
        try:
            out["rows"] = run(a)
            out["ok"] = True
        except Exception as e:  # report every failure as JSON, the test judges it
            out["error_code"] = error_code(e)
            out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
