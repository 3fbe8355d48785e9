"""Runs every case of a corpus against MariaDB and against server-shim and classifies it.

Usage: compare.py CORPUS MARIADB_PORT SHIM_PORT SHIM_PASSWORD
Prints one JSON object: counts, and each case that is not agreed, with both outcomes.

A case is one statement per line (blank lines and lines starting with '#' are skipped).
Outcomes are compared as the wire gives them: each value's text (PyMySQL with no converters)
and each column's type code; or the error code.
- agree: the same rows and column types, or the same error code;
- refused: server-shim answered with an error where MariaDB did not (or with another code);
- disagree: server-shim answered with a value or type MariaDB does not give, or answered
  where MariaDB refused.
"""
import json
import sys

import pymysql

SETUP = [
    "SET time_zone = '+00:00'",
    "CREATE DATABASE IF NOT EXISTS diff",
    "USE diff",
]


def connect(port, user, password):
    c = pymysql.connect(host="127.0.0.1", port=port, user=user, password=password,
                        conv={}, autocommit=True, connect_timeout=10, read_timeout=30)
    cur = c.cursor()
    for s in SETUP:
        cur.execute(s)
    return c


def outcome(conn, sql):
    cur = conn.cursor()
    try:
        cur.execute(sql)
    except pymysql.err.MySQLError as e:
        code = e.args[0] if e.args and isinstance(e.args[0], int) else -1
        return {"error": code, "message": str(e.args[1]) if len(e.args) > 1 else str(e)}
    rows = cur.fetchall() if cur.description else []
    types = [d[1] for d in cur.description] if cur.description else []
    return {
        "types": types,
        "rows": [[v if v is None or isinstance(v, str) else v.hex() for v in row] for row in rows],
    }


def main():
    corpus, maria_port, shim_port, shim_password = sys.argv[1:5]
    maria = connect(int(maria_port), "root", "")
    shim = connect(int(shim_port), "root", shim_password)
    counts = {"agree": 0, "refused": 0, "disagree": 0}
    cases = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            sql = line.strip()
            if not sql or sql.startswith("#"):
                continue
            m, s = outcome(maria, sql), outcome(shim, sql)
            if "error" in s:
                kind = "agree" if m.get("error") == s["error"] else "refused"
            elif "error" in m or m != s:
                kind = "disagree"
            else:
                kind = "agree"
            counts[kind] += 1
            if kind != "agree":
                cases.append({"sql": sql, "kind": kind, "mariadb": m, "shim": s})
    print(json.dumps({"counts": counts, "cases": cases}, indent=1))


main()
