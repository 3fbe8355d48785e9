"""Runs every case of a corpus against MariaDB and against server-shim and classifies it.

Usage: compare.py CORPUS MARIADB_PORT SHIM_PORT SHIM_PASSWORD
Prints one JSON object: counts, and each case that is not agreed, with both outcomes.

A case is one statement per line (blank lines and lines starting with '#' are skipped).
Outcomes are compared as the wire gives them: each value's text (PyMySQL with no converters)
and each column's type, as the class a client decodes it to (an integer of any width, a
decimal, a float, a string or blob, a date, a date and time, a time); or the error code. A
column whose every value is NULL matches any type.
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


# What a client decodes each MySQL column type to (protocol type codes).
CLASSES = {
    "integer": {1, 2, 3, 8, 9, 13},
    "bit": {16},
    "decimal": {0, 246},
    "float": {4, 5},
    "string": {15, 247, 248, 249, 250, 251, 252, 253, 254, 245},
    "date": {10, 14},
    "datetime": {7, 12},
    "time": {11},
    "null": {6},
}


def type_class(code):
    for name, codes in CLASSES.items():
        if code in codes:
            return name
    return "type %d" % code


def same(m, s):
    """Whether two successful outcomes are the same to a client."""
    if m["rows"] != s["rows"] or len(m["types"]) != len(s["types"]):
        return False
    for i, (a, b) in enumerate(zip(m["types"], s["types"])):
        if all(row[i] is None for row in m["rows"]):
            continue
        if type_class(a) != type_class(b):
            return False
    return True


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
            elif "error" in m or not same(m, s):
                kind = "disagree"
            else:
                kind = "agree"
            counts[kind] += 1
            if kind != "agree":
                cases.append({"sql": sql, "kind": kind, "mariadb": m, "shim": s})
    print(json.dumps({"counts": counts, "cases": cases}, indent=1))


main()
