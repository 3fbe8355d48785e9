#!/usr/bin/env python3
"""Sessions carried across a stop, proven by client libraries' own test suites: a suite runs
straight to the compute, then through a relay that carries every session to a new login after
every command (`resumable_sessions = true`, `force_reattach_every = 1`: its state read by value
and restored, as after a stop). Every test must end the same way in both runs. Two computes:
server-shim, and MariaDB with perceptron_dual (its accounts IDENTIFIED VIA perceptron_dual,
which also log in directly). Four suites, each given by the path of its source:

  PyMySQL                 a clone of its repository (pytest, `pymysql/tests`; its
                          `databases.json` is replaced for the runs and put back afterwards)
  mysql-connector-python  its unpacked sdist, which ships its tests (`unittests.py
                          --use-external-server`, the pure-Python connector): e.g.
                          `pip download --no-deps --no-binary :all: mysql-connector-python`
  node-mysql2             a clone of its repository with `npm ci` run in it (poku, its
                          `test/` directory; each test file is one outcome)
  aiomysql                its unpacked sdist, which ships its tests (pytest): it logs in as
                          `root`, over TLS, which its fixture checks on the compute's side
                          (`Ssl_version`): the compute and the relay serve a certificate
                          issued by the suite's own test CA, with `compute_tls = "on"`

  straight   suite -> compute (its own port)
  resumed    suite -> relay -> compute, each session reattached after every command

Reported: each run's pass / fail / skip counts, every test whose outcome differs, and the
command boundaries the relay carried to a new login against those it pinned (by reason: an
open transaction, a lock, a statement it does not recognise...), from its log.

Usage: client-suites.py SUITE_PATH [shim|mariadb ...]   (default: both)
Writes bench/results/client-suites[-connector|-node|-aiomysql].{txt,json}. PyMySQL's needs
pytest and pytest-timeout; aiomysql's, the versions its requirements-dev.txt names (pytest,
PyMySQL, SQLAlchemy 1.3, uvloop) and pytest-timeout: run this script with a Python (a venv)
that has them; node-mysql2's, Node.js.
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


def sql(port, user, text):
    subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", "-P%d" % port, "-u" + user,
                    "-p" + ROOT_PW, "--skip-ssl", "-e", text], check=True, capture_output=True)


class Suite:
    """A suite's source at `path`. Used as a context manager around its runs. What its runs
    need of the compute besides the suite's accounts: `tls`, a directory with the suite's test
    CA (`ca.pem`, `ca-key.pem`) and its server key, to serve TLS from a certificate that CA
    issues; `root`, whether it logs in as `root`."""
    tls, root = None, False

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass


def ran_no_test(port, output):
    """The error for a run whose `output` shows no test outcome."""
    return RuntimeError("the suite ran no test against port %d; its output ends:\n%s"
                        % (port, "\n".join(output.splitlines()[-30:])))


class PyMySQL(Suite):
    """PyMySQL's suite, from a clone of its repository."""
    name, results = "PyMySQL", "client-suites"

    def __init__(self, path):
        super().__init__(path)
        self.config = os.path.join(path, "pymysql", "tests", "databases.json")

    @staticmethod
    def fits(path):
        return os.path.isdir(os.path.join(path, "pymysql", "tests"))

    def __enter__(self):
        self.saved = self.config + ".perceptron-saved"
        if os.path.exists(self.config) and not os.path.exists(self.saved):
            shutil.copyfile(self.config, self.saved)
        return self

    def __exit__(self, *_):
        if os.path.exists(self.saved):
            shutil.move(self.saved, self.config)

    @staticmethod
    def fresh(port, user):
        sql(port, user, "DROP DATABASE IF EXISTS test1; DROP DATABASE IF EXISTS test2; "
                        "CREATE DATABASE test1 DEFAULT CHARACTER SET utf8mb4; "
                        "CREATE DATABASE test2 DEFAULT CHARACTER SET utf8mb4")

    def run(self, port, users, out):
        """Runs the suite against 127.0.0.1:port as `users` (its first and second account):
        {test id: "pass" | "fail" | "skip"}."""
        with open(self.config, "w") as f:
            f.write('[{"host": "127.0.0.1", "port": %d, "user": "%s", "password": "%s", '
                    '"database": "test1", "use_unicode": true, "local_infile": true},\n'
                    ' {"host": "127.0.0.1", "port": %d, "user": "%s", "password": "%s", '
                    '"database": "test2"}]\n'
                    % (port, users[0], ROOT_PW, port, users[1], TEST2_PW))
        return pytest_outcomes(self.path, ["pymysql/tests"], out)


def pytest_outcomes(path, args, out, env=None):
    """Runs pytest in `path` with `args`: {test id: "pass" | "fail" | "skip"}."""
    xml = out + ".xml"
    with open(out + ".log", "w") as f:
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--timeout", "120", "--junitxml", xml] + args, cwd=path,
                       stdout=f, stderr=subprocess.STDOUT, env=env, timeout=3600)
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = "%s::%s" % (case.get("classname"), case.get("name"))
        kinds = {child.tag for child in case}
        outcomes[name] = ("fail" if kinds & {"failure", "error"} else
                          "skip" if "skipped" in kinds else "pass")
    return outcomes


# unittest's verbose outcome of a test, at the end of its `name ... ` line or, where the test
# wrote to standard error first, alone on a later line.
UNITTEST_OUTCOME = re.compile(r"(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$")
UNITTEST_KIND = {"ok": "pass", "FAIL": "fail", "ERROR": "fail", "skipped": "skip",
                 "expected failure": "pass", "unexpected success": "fail"}


def unittest_outcomes(text):
    """{test: "pass" | "fail" | "skip"} from `unittest -v` output (a class's or a module's
    set-up that fails is a test of its own, as unittest counts it)."""
    outcomes, pending = {}, None
    for line in text.splitlines():
        m = re.match(r"^(\S.*?) \.\.\. (.*)$", line)
        rest = line
        if m and not line.startswith(" "):
            pending, rest = m.group(1), m.group(2)
        o = UNITTEST_OUTCOME.match(rest)
        if pending is not None and o:
            kind = o.group(1).split(" '")[0]
            outcomes[pending] = UNITTEST_KIND["skipped" if kind.startswith("skipped") else kind]
            pending = None
    return outcomes


class ConnectorPython(Suite):
    """mysql-connector-python's suite, from its unpacked sdist."""
    name, results = "mysql-connector-python", "client-suites-connector"

    @staticmethod
    def fits(path):
        return os.path.isfile(os.path.join(path, "unittests.py"))

    @staticmethod
    def fresh(port, user):
        sql(port, user, "DROP DATABASE IF EXISTS myconnpy")

    def run(self, port, users, out):
        """Runs the suite against 127.0.0.1:port as `users[0]`: {test: outcome}."""
        log = out + ".log"
        with open(log, "w") as f:
            subprocess.run([sys.executable, "unittests.py", "--use-external-server",
                            "--skip-install", "--host", "127.0.0.1", "--port", str(port),
                            "--user", users[0], "--password", ROOT_PW, "--verbosity", "2",
                            "--log", out + ".suite-log"],
                           cwd=self.path, stdout=f, stderr=subprocess.STDOUT, timeout=3600)
        with open(log, errors="replace") as f:
            text = f.read()
        outcomes = unittest_outcomes(text)
        if not outcomes:
            with open(out + ".suite-log", errors="replace") as f:
                text += f.read()
            raise ran_no_test(port, text)
        return outcomes


class NodeMysql2(Suite):
    """node-mysql2's suite, from a clone of its repository with its dependencies installed."""
    name, results = "node-mysql2", "client-suites-node"
    # poku's compact reporter: one line per test file, its outcome first.
    FILE_OUTCOME = re.compile(r"^ (PASS|FAIL) +(test/\S+)$")

    @staticmethod
    def fits(path):
        return os.path.isfile(os.path.join(path, "test", "common.test.mts"))

    def __enter__(self):
        if not os.path.isdir(os.path.join(self.path, "node_modules", "poku")):
            raise SystemExit("%s: run `npm ci` in it first (the suite runs on poku and tsx)"
                             % self.path)
        return self

    @staticmethod
    def fresh(port, user):
        sql(port, user, "DROP DATABASE IF EXISTS test; CREATE DATABASE test")

    def run(self, port, users, out):
        """Runs the suite against 127.0.0.1:port as `users[0]`: {test file: outcome}."""
        env = dict(os.environ, CI="1", MYSQL_HOST="127.0.0.1", MYSQL_PORT=str(port),
                   MYSQL_USER=users[0], MYSQL_PASSWORD=ROOT_PW, MYSQL_DATABASE="test",
                   NO_COLOR="1", FORCE_COLOR="0")
        log = out + ".log"
        with open(log, "w") as f:
            subprocess.run([os.path.join("node_modules", ".bin", "poku")], cwd=self.path,
                           env=env, stdout=f, stderr=subprocess.STDOUT, timeout=3600)
        with open(log, errors="replace") as f:
            text = re.sub(r"\x1b\[[0-9;]*m", "", f.read())
        outcomes = {m.group(2): m.group(1).lower() for m in
                    (self.FILE_OUTCOME.match(line) for line in text.splitlines()) if m}
        if not outcomes:
            raise ran_no_test(port, text)
        return outcomes


class AioMySQL(Suite):
    """aiomysql's suite, from its unpacked sdist."""
    name, results = "aiomysql", "client-suites-aiomysql"
    # Its fixture logs in as `root` (MYSQL_ROOT_PASSWORD), nothing else.
    root = True

    def __init__(self, path):
        super().__init__(path)
        # Its fixture logs in over TLS and checks the compute's `Ssl_version`: the compute
        # serves a certificate signed by the suite's own test CA, which the suite trusts.
        self.tls = os.path.join(path, "tests", "ssl_resources", "ssl")

    @staticmethod
    def fits(path):
        return (os.path.isdir(os.path.join(path, "aiomysql"))
                and os.path.isfile(os.path.join(path, "tests", "conftest.py")))

    @staticmethod
    def fresh(port, user):
        sql(port, user, "DROP DATABASE IF EXISTS test_pymysql; "
                        "DROP DATABASE IF EXISTS test_pymysql2")

    def run(self, port, users, out):
        """Runs the suite against 127.0.0.1:port as root: {test id: outcome}."""
        return pytest_outcomes(self.path, ["--mysql-address", "127.0.0.1:%d" % port, "tests"],
                               out, env=dict(os.environ, MYSQL_ROOT_PASSWORD=ROOT_PW))


def counts(outcomes):
    return {k: sum(1 for v in outcomes.values() if v == k) for k in ("pass", "fail", "skip")}


# The suites fail logins on purpose (wrong passwords, users they never created), many more
# than the relay's failed-login budgets allow one source: left on, they block 127.0.0.1 and
# every later test fails with ERR 1129. The budgets are the relay's policy, not what is
# compared here.
BUDGETS = ("[relay.budgets]\nwakes_per_source = 0\nwakes_per_user = 0\n"
           "failed_logins_per_source = 0\nfailed_logins_per_user = 0\n")


def tls_files(cert_dir):
    """A certificate for 127.0.0.1 issued by the CA in `cert_dir` (with its key, which the
    suite ships) and its key, in a directory of our own (mode 0600, as the relay and
    server-shim require of secrets). The suite's own server certificate is X.509 v1, which
    rustls refuses; this one is v3, and the suite trusts it as it trusts its own."""
    out = h.tmpdir("client-suites-tls")
    key, csr, cert = (os.path.join(out, n) for n in ("server-key.pem", "server.csr",
                                                     "server-cert.pem"))
    ext = os.path.join(out, "v3.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints = CA:FALSE\nsubjectAltName = IP:127.0.0.1\n"
                "keyUsage = digitalSignature, keyEncipherment\n"
                "extendedKeyUsage = serverAuth\n")
    shutil.copyfile(os.path.join(cert_dir, "server-key.pem"), key)
    os.chmod(key, 0o600)
    subprocess.run(["openssl", "req", "-new", "-key", key, "-subj", "/CN=127.0.0.1",
                    "-out", csr], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA",
                    os.path.join(cert_dir, "ca.pem"), "-CAkey",
                    os.path.join(cert_dir, "ca-key.pem"), "-set_serial", "1", "-days", "7",
                    "-extfile", ext, "-out", cert], check=True, capture_output=True)
    return cert, key


def compute_relay(compute, suite):
    """A relay reattaching every session after every command, its instance running on
    `compute` with the suite's accounts (and TLS, and root's password, where `suite` needs
    them)."""
    toml = 'stop_after = "1h"\nforce_reattach_every = 1\n'
    cert_dir = suite.tls
    cert = key = None
    if cert_dir:
        # TLS to the compute too, so that the compute sees an encrypted session, as straight.
        cert, key = tls_files(cert_dir)
        toml += ('compute_tls = "on"\n[instance.tls]\ncert = "%s"\nkey = "%s"\n'
                 % (cert, key))
    if compute == "mariadb":
        tls_args = ["--ssl-cert=" + cert, "--ssl-key=" + key] if cert else []
        relay = h.dual_mariadb_relay("client-suites-maria", instance_toml=toml,
                                     relay_toml=BUDGETS, mariadbd_args=tls_args)
        mariadb_accounts(relay.compute_port)
        if suite.root:
            # root@127.0.0.1 (mariadb-install-db's, no password) as a perceptron_dual
            # account, so that the suite's root logs in through the relay too.
            subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1",
                            "-P%d" % relay.compute_port, "-uroot", "--skip-ssl", "-e",
                            "ALTER USER root@'127.0.0.1' IDENTIFIED VIA perceptron_dual "
                            "USING PASSWORD('%s')" % ROOT_PW], check=True, capture_output=True)
        # The relay greets as MariaDB once a relayed login has proven the compute (before,
        # as server-shim: docs/clients.md), and mysql-connector-python picks its collation
        # by the version it is greeted with.
        sql(relay.port, USERS["mariadb"][0], "SELECT 1")
        return relay
    tickets = h.ticket_key(h.tmpdir("client-suites-keys"))
    tls_args = ("--tls-cert", cert, "--tls-key", key) if cert else ()
    relay = h.Relay("client-suites", instance_toml='resumable_sessions = true\n' + toml,
                    relay_toml=BUDGETS,
                    shim_args=("--ticket-key-file", tickets, "--instance", "demo") + tls_args)
    for user, password in zip(USERS["shim"], (ROOT_PW, TEST2_PW)):
        account(relay.data, user, password)
    relay.admin("POST", "/v1/instances/demo/resume")
    relay.wait_state("running")
    return relay


def compare(suite, compute):
    """Both runs of `suite` on `compute`: (report lines, results)."""
    relay = compute_relay(compute, suite)
    users = USERS[compute]
    try:
        runs = {}
        for name, port in (("straight", relay.compute_port), ("resumed", relay.port)):
            suite.fresh(relay.compute_port, users[0])
            runs[name] = suite.run(port, users, os.path.join(relay.dir, name))
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
    failures = [re.search(r'error=(.*)$', line) for line in log
                if "forced reattach failed" in line]
    failed = len(failures)
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
            "pinned by: %s" % dict(sorted(pinned.items(), key=lambda kv: -kv[1]))]
    out += ["  reattach failed: %s" % (m.group(1) if m else "?") for m in failures] + [""]
    return out, {"straight": counts(straight), "resumed": counts(resumed), "differ": differ,
                 "carried": carried, "pinned": pinned, "failed_reattaches": failed}


def main():
    if len(sys.argv) < 2 or any(c not in USERS for c in sys.argv[2:]):
        sys.exit(__doc__)
    path = os.path.abspath(sys.argv[1])
    kinds = [k for k in (PyMySQL, ConnectorPython, NodeMysql2, AioMySQL) if k.fits(path)]
    if not kinds:
        sys.exit("%s: not a PyMySQL or node-mysql2 checkout, nor mysql-connector-python's "
                 "or aiomysql's sdist\n\n%s" % (path, __doc__))
    computes = sys.argv[2:] or list(USERS)
    out = ["# %s's own suite, straight to the compute and with every session reattached "
           "after every command" % kinds[0].name, "machine: %s" % h.machine(),
           "source: %s" % path, ""]
    data = {}
    with kinds[0](path) as suite:
        for compute in computes:
            try:
                lines, data[compute] = compare(suite, compute)
            except RuntimeError as e:
                lines, data[compute] = ["## on %s" % compute, str(e), ""], {"error": str(e)}
            out += lines
    h.save(kinds[0].results, "\n".join(out), data)


if __name__ == "__main__":
    try:
        main()
    finally:
        h.stop_all()
