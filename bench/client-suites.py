#!/usr/bin/env python3
"""Sessions carried across a stop, proven by a client library's own test suite: PyMySQL's
suite (a checkout of its repository, given by path) runs straight to the compute, then through
a relay that carries every session to a new login after every command
(`resumable_sessions = true`, `force_reattach_every = 1`: its state read by value and restored,
as after a stop). Every test must end the same way in both runs. Two computes: server-shim,
and MariaDB with perceptron_dual (its accounts IDENTIFIED VIA perceptron_dual, which also log
in directly).

  straight   pytest -> compute (its own port)
  resumed    pytest -> relay -> compute, each session reattached after every command

Reported: each run's pass / fail / skip counts, every test whose outcome differs, and the
command boundaries the relay carried to a new login against those it pinned (by reason: an
open transaction, a lock, a statement it does not recognise...), from its log. The suite's
own `pymysql/tests/databases.json` is replaced for the runs and put back afterwards.

Usage: client-suites.py PYMYSQL_CHECKOUT [shim|mariadb ...]   (default: both)
Writes bench/results/client-suites.{txt,json}. Needs pytest and pytest-timeout.
"""

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

ROOT_PW, TEST2_PW = "rootpw", "some password"
# On MariaDB `root` is root@localhost (no password, not through a relay): the suite's two
# accounts have names of their own there.
USERS = {"shim": ("root", "test2"), "mariadb": ("suite1", "suite2")}


def account(data, name, password):
    subprocess.run([os.path.join(h.BIN, "server-shim"), "user", "add", name, "--admin",
                    "--password-stdin", "--data", data], input=password.encode(), check=True,
                   capture_output=True)


def mariadb_accounts(port):
    """The suite's accounts on MariaDB (logged in as root on the compute's own port)."""
    sql = ";".join("CREATE USER %s@'%%' IDENTIFIED VIA perceptron_dual USING PASSWORD('%s'); "
                   "GRANT ALL ON *.* TO %s@'%%' WITH GRANT OPTION" % (u, pw, u)
                   for u, pw in zip(USERS["mariadb"], (ROOT_PW, TEST2_PW)))
    subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", "-P%d" % port, "-uroot",
                    "--skip-ssl", "-e", sql], check=True, capture_output=True)


def fresh_databases(port, user):
    sql = ("DROP DATABASE IF EXISTS test1; DROP DATABASE IF EXISTS test2; "
           "CREATE DATABASE test1 DEFAULT CHARACTER SET utf8mb4; "
           "CREATE DATABASE test2 DEFAULT CHARACTER SET utf8mb4")
    subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", "-P%d" % port, "-u" + user,
                    "-p" + ROOT_PW, "--skip-ssl", "-e", sql], check=True, capture_output=True)


def run_suite(checkout, port, users, xml):
    """Runs the suite against 127.0.0.1:port as `users` (its first and second account):
    {test id: "pass" | "fail" | "skip"}."""
    config = os.path.join(checkout, "pymysql", "tests", "databases.json")
    with open(config, "w") as f:
        f.write('[{"host": "127.0.0.1", "port": %d, "user": "%s", "password": "%s", '
                '"database": "test1", "use_unicode": true, "local_infile": true},\n'
                ' {"host": "127.0.0.1", "port": %d, "user": "%s", "password": "%s", '
                '"database": "test2"}]\n' % (port, users[0], ROOT_PW, port, users[1], TEST2_PW))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--timeout", "120", "--junitxml", xml, "pymysql/tests"], cwd=checkout,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = "%s::%s" % (case.get("classname"), case.get("name"))
        kinds = {child.tag for child in case}
        outcomes[name] = ("fail" if kinds & {"failure", "error"} else
                          "skip" if "skipped" in kinds else "pass")
    return outcomes


def counts(outcomes):
    return {k: sum(1 for v in outcomes.values() if v == k) for k in ("pass", "fail", "skip")}


def compute_relay(compute):
    """A relay reattaching every session after every command, its instance running on
    `compute` with the suite's accounts."""
    toml = 'stop_after = "1h"\nforce_reattach_every = 1\n'
    if compute == "mariadb":
        relay = h.dual_mariadb_relay("client-suites-maria", instance_toml=toml)
        mariadb_accounts(relay.compute_port)
        return relay
    tickets = h.ticket_key(h.tmpdir("client-suites-keys"))
    relay = h.Relay("client-suites", instance_toml='resumable_sessions = true\n' + toml,
                    shim_args=("--ticket-key-file", tickets, "--instance", "demo"))
    for user, password in zip(USERS["shim"], (ROOT_PW, TEST2_PW)):
        account(relay.data, user, password)
    relay.admin("POST", "/v1/instances/demo/resume")
    relay.wait_state("running")
    return relay


def compare(checkout, compute):
    """Both runs on `compute`: (report lines, results)."""
    relay = compute_relay(compute)
    users = USERS[compute]
    try:
        runs = {}
        for name, port in (("straight", relay.compute_port), ("resumed", relay.port)):
            fresh_databases(relay.compute_port, users[0])
            runs[name] = run_suite(checkout, port, users,
                                   os.path.join(relay.dir, name + ".xml"))
        log = relay.log_lines()
    finally:
        relay.stop()
    carried = sum(1 for line in log if "session reattached by force" in line)
    pinned = {}
    for line in log:
        if "forced reattach skipped" in line:
            m = re.search(r'why="([^"]*)"', line)
            why = m.group(1) if m else "?"
            pinned[why] = pinned.get(why, 0) + 1
    failed = sum(1 for line in log if "forced reattach failed" in line)
    straight, resumed = runs["straight"], runs["resumed"]
    differ = sorted(t for t in set(straight) | set(resumed)
                    if straight.get(t) != resumed.get(t))
    total = carried + sum(pinned.values())
    out = ["## on %s" % compute,
           "%-9s %s" % ("straight", counts(straight)), "%-9s %s" % ("resumed", counts(resumed)),
           "tests whose outcome differs: %d" % len(differ)]
    out += ["  %s: straight %s, resumed %s" % (t, straight.get(t), resumed.get(t))
            for t in differ]
    failing = sorted(t for t, v in straight.items() if v == "fail")
    out += ["failing straight: %d" % len(failing)] + ["  %s" % t for t in failing]
    out += ["command boundaries: %d carried to a new login, %d pinned (%.1f %% carried), "
            "%d failed reattaches" % (carried, total - carried,
                                      100.0 * carried / max(total, 1), failed),
            "pinned by: %s" % dict(sorted(pinned.items(), key=lambda kv: -kv[1])), ""]
    return out, {"straight": counts(straight), "resumed": counts(resumed), "differ": differ,
                 "carried": carried, "pinned": pinned, "failed_reattaches": failed}


def main():
    if len(sys.argv) < 2 or any(c not in USERS for c in sys.argv[2:]):
        sys.exit(__doc__)
    checkout = os.path.abspath(sys.argv[1])
    computes = sys.argv[2:] or list(USERS)
    config = os.path.join(checkout, "pymysql", "tests", "databases.json")
    saved = config + ".perceptron-saved"
    if os.path.exists(config) and not os.path.exists(saved):
        shutil.copyfile(config, saved)
    out = ["# PyMySQL's own suite, straight to the compute and with every session reattached "
           "after every command", "machine: %s" % h.machine(), "checkout: %s" % checkout, ""]
    data = {}
    try:
        for compute in computes:
            lines, data[compute] = compare(checkout, compute)
            out += lines
    finally:
        if os.path.exists(saved):
            shutil.move(saved, config)
    h.save("client-suites", "\n".join(out), data)


if __name__ == "__main__":
    try:
        main()
    finally:
        h.stop_all()
