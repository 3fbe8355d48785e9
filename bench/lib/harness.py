"""Shared benchmark plumbing: free ports, a relay with one instance `demo`, the admin API,
statistics, RSS, and processes that are always stopped by PID.

Everything binds 127.0.0.1 on ports the kernel hands out; every process started here is
registered and stopped (SIGTERM, then SIGKILL) by `stop_all()` at exit.
"""

import atexit
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("PERCEPTRON_BIN", os.path.join(ROOT, "target", "release"))
RESULTS = os.path.join(ROOT, "bench", "results")
USER = b"app"
PASSWORD = b"bench-Pw-0123456789"

_procs = []
_dirs = []
_hosts = []


def tmpdir(prefix):
    """A temporary directory, removed at exit unless BENCH_KEEP=1 (to read the logs)."""
    d = tempfile.mkdtemp(prefix="perceptron-bench-%s-" % prefix)
    _dirs.append(d)
    return d


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(cmd, **kw):
    """Popen, registered for stop_all()."""
    p = subprocess.Popen(cmd, **kw)
    _procs.append(p)
    return p


def stop(p, grace=10.0):
    if p.poll() is None:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    if p in _procs:
        _procs.remove(p)


def stop_all():
    for p in list(reversed(_procs)):
        stop(p)
    for hs in _hosts:
        hs.remove()
    _hosts.clear()
    if os.environ.get("BENCH_KEEP") != "1":
        for d in _dirs:
            shutil.rmtree(d, ignore_errors=True)


atexit.register(stop_all)
signal.signal(signal.SIGTERM, lambda *_: (stop_all(), os._exit(143)))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User + system CPU time of every thread of a process so far."""
    ticks = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])   # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def relay_b_from_env():
    """(binary, env) of the A/B contender named by BENCH_RELAY_B (extra environment from
    BENCH_RELAY_B_ENV="K=V ..."), or None when it is not set."""
    binary = os.environ.get("BENCH_RELAY_B")
    if not binary:
        return None
    return binary, dict(kv.split("=", 1) for kv in os.environ.get("BENCH_RELAY_B_ENV", "").split())


def pctl(xs, q):
    """Nearest-rank percentile (q in 0..100)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = max(0, min(len(xs) - 1, int(round(q / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]


def summary(xs, scale=1.0):
    """median, p5, p95, p99, min, max, n of xs (times scale)."""
    ys = [x * scale for x in xs]
    if not ys:
        return {"n": 0}
    return {
        "n": len(ys), "median": statistics.median(ys), "p5": pctl(ys, 5), "p95": pctl(ys, 95),
        "p99": pctl(ys, 99), "min": min(ys), "max": max(ys),
    }


def fmt(s, unit="ms", digits=2):
    if not s.get("n"):
        return "n=0"
    f = "%%.%df" % digits
    return ("median " + f + " %s  p5 " + f + "  p95 " + f + "  p99 " + f + "  min " + f
            + "  max " + f + "  (n=%d)") % (s["median"], unit, s["p5"], s["p95"], s["p99"],
                                          s["min"], s["max"], s["n"])


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = "%.1f GiB" % (int(line.split()[1]) / 1048576)
    return {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "mem": mem,
            "loadavg": open("/proc/loadavg").read().split()[:3]}


def save(name, text, data):
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, name + ".txt"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, name + ".json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    print(text)


class Relay:
    """A relay with one instance `demo` in its own temporary directory.

    driver=None: the process driver running server-shim on the compute port (the embedded
    default). driver="adopt": an exec driver whose start/stop/status are `true`, so the relay
    adopts whatever already listens on compute_port and every connection takes the direct
    route.
    binary / env: another relay build and extra environment, to compare two builds (or
    settings) side by side in one run.
    bin_dir: a directory holding another build's `relay` and `server-shim`, both used (the
    regression guard compares whole builds, the compute's start-up included).
    route: the instance's `route` ("pump", or "nftables" for the kernel route: root only; the
    relay's table is named after its temporary state directory and deleted when it stops).
    instance_toml: more lines for the `[[instance]]` table (capacity, stop_after).
    relay_toml: more lines for the `[relay]` table (caps such as max_pending_connections).
    shim_args: more arguments for the managed server-shim (`{DIR}`: the relay's directory).
    key_file: a key ring to use (copied) instead of a fresh one: a compute the relay adopts
    must prove the relay's key.
    hosts: a Hosts (three hosts in network namespaces): the relay runs on the relay's host,
    listening (clients and the admin API, with a token) on its client-side address, and
    its compute is at the compute's host's address.
    """

    def __init__(self, name, compute_port=None, driver=None, idle_pause_after="1h",
                 handshake_timeout="10s", nofile=None, auth="dual", binary=None, env=None,
                 route="pump", instance_toml="", bin_dir=None, relay_toml="", shim_args=(),
                 key_file=None, hosts=None):
        self.bin = bin_dir or BIN
        self.host = hosts.relay if hosts else "127.0.0.1"
        compute_host = hosts.compute if hosts else "127.0.0.1"
        self.token = None
        binary = binary or os.path.join(self.bin, "relay")
        self.dir = tmpdir(name)
        self.port, self.admin_port = free_port(), free_port()
        self.compute_port = compute_port or free_port()
        self.key = os.path.join(self.dir, "perceptron.key")
        self.data = os.path.join(self.dir, "data")
        if key_file:
            shutil.copyfile(key_file, self.key)
            os.chmod(self.key, 0o600)
        else:
            subprocess.run([binary, "keygen", "--id", "bench", "--out", self.key],
                           check=True, capture_output=True)
        if driver is None:
            add_user(self.data, self.bin)
            shim = self.shim_cmd(self.compute_port, self.data, bin_dir=self.bin) + [
                a.replace("{DIR}", self.dir) for a in shim_args]
            drv = ('[instance.driver]\nkind = "process"\ncommand = [%s]\nstop_grace = "5s"\n'
                   % ", ".join(json.dumps(a) for a in shim))
        elif driver == "adopt":
            drv = ('[instance.driver]\nkind = "exec"\nstart = ["true"]\nstop = ["true"]\n'
                   'status = ["true"]\npoll_interval = "1h"\n')
        else:
            drv = driver.replace("{DIR}", self.dir)   # a custom [instance.driver] table
        if "[relay.budgets]" not in relay_toml:
            # Benchmarks wake an instance from one source tens of times on purpose; the
            # default wake budgets (60 per source, 120 per user an hour) would refuse them.
            relay_toml += "\n[relay.budgets]\nwakes_per_source = 0\nwakes_per_user = 0\n"
        if hosts:
            # Off loopback the admin API wants a token.
            self.token = "bench-admin-token-%d" % self.admin_port
            token_file = os.path.join(self.dir, "admin.token")
            with open(token_file, "w") as f:
                f.write(self.token + "\n")
            os.chmod(token_file, 0o600)
            relay_toml = 'admin_token_file = "admin.token"\n' + relay_toml
        self.config = os.path.join(self.dir, "relay.toml")
        with open(self.config, "w") as f:
            f.write('[relay]\nstate_dir = "state"\nkey_file = "perceptron.key"\n'
                    'admin_listen = "%s:%d"\n' % (self.host, self.admin_port) + relay_toml +
                    '\n\n[[instance]]\nname = "demo"\n'
                    'listen = "%s:%d"\ncompute = "%s:%d"\nauth = "%s"\n'
                    'resume_timeout = "30s"\nhandshake_timeout = "%s"\nidle_pause_after = "%s"\n'
                    'route = "%s"\n%s\n%s'
                    % (self.host, self.port, compute_host, self.compute_port, auth,
                       handshake_timeout, idle_pause_after, route, instance_toml, drv))
        self.log = os.path.join(self.dir, "relay.log")
        env = {**os.environ, "RUST_LOG": "info", "NO_COLOR": "1", **(env or {})}
        pre = None
        if nofile:
            pre = lambda: __import__("resource").setrlimit(  # noqa: E731
                __import__("resource").RLIMIT_NOFILE, (nofile, nofile))
        self.proc = start((hosts.on_relay() if hosts else []) + [binary, "run", "--config", self.config],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=open(self.log, "w"), env=env, preexec_fn=pre)
        deadline = time.time() + 20
        while True:
            try:
                self.admin("GET", "/v1/instances")
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("relay did not start:\n" + open(self.log).read())
                time.sleep(0.01)

    @staticmethod
    def shim_cmd(port, data, key=None, bin_dir=None):
        cmd = [os.path.join(bin_dir or BIN, "server-shim"), "run", "--listen", "127.0.0.1:%d" % port,
               "--data", data]
        return cmd + ["--key-file", key] if key else cmd + ["--key-file",
                                                           os.path.join(os.path.dirname(data),
                                                                        "perceptron.key")]

    def admin(self, method, path):
        c = http.client.HTTPConnection(self.host, self.admin_port, timeout=60)
        c.request(method, path,
                  headers={"Authorization": "Bearer " + self.token} if self.token else {})
        r = c.getresponse()
        body = r.read().decode()
        c.close()
        return r.status, body

    def state(self):
        _, body = self.admin("GET", "/v1/instances")
        m = re.search(r'"state":\s*"([a-z]+)"', body)
        return m.group(1) if m else "?"

    def metric(self, series):
        _, body = self.admin("GET", "/metrics")
        total = 0.0
        for line in body.splitlines():
            if line.startswith(series):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def pause(self, timeout=30.0, until="paused"):
        """Pauses and waits until the admin API says `until` (paused; frozen with stop_after),
        retrying while connections close."""
        deadline = time.time() + timeout
        while True:
            status, body = self.admin("POST", "/v1/instances/demo/pause")
            if self.state() == until:
                return
            if time.time() > deadline:
                raise RuntimeError("could not pause: %s %s" % (status, body))
            time.sleep(0.005)

    def wait_state(self, want, timeout=30.0):
        deadline = time.time() + timeout
        while self.state() != want:
            if time.time() > deadline:
                raise RuntimeError("instance never became %s (is %s)" % (want, self.state()))
            time.sleep(0.005)

    def log_lines(self):
        with open(self.log, errors="replace") as f:
            return f.read().splitlines()

    def stop(self):
        stop(self.proc, 30)


class Hosts:
    """Three hosts on one machine, as tests/src/hosts.rs makes them: this namespace is the
    client's host; two network namespaces made here are the relay's host and the compute's,
    joined by veth pairs, the relay's host routing between them, so the client also reaches
    the compute straight, through it, as through a router:

        client 10.211.K.1 -- 10.211.K.2 relay 10.212.K.1 -- 10.212.K.2 compute

    Everything is named after this process and removed at exit (deleting a namespace deletes
    its veth ends). Needs root, ip (iproute2) and nsenter (util-linux)."""

    def __init__(self):
        tag = "pb%d" % (os.getpid() % 100000)
        self.relay_ns, self.compute_ns, self.link = tag + "r", tag + "c", tag + "h"
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True,
                              text=True).stdout
        k = next(k for k in range(1, 250) if "10.211.%d." % k not in used
                 and "10.212.%d." % k not in used)
        self.client, self.relay = "10.211.%d.1" % k, "10.211.%d.2" % k
        self.relay_inner, self.compute = "10.212.%d.1" % k, "10.212.%d.2" % k
        self.compute_route = "10.212.%d.0/24" % k
        _hosts.append(self)
        r, c, h = self.relay_ns, self.compute_ns, self.link
        for args in (["netns", "add", r], ["netns", "add", c],
                     ["link", "add", h, "type", "veth", "peer", "name", "toclient", "netns", r],
                     ["-n", r, "link", "add", "tocompute", "type", "veth", "peer", "name",
                      "torelay", "netns", c],
                     ["addr", "add", self.client + "/24", "dev", h], ["link", "set", h, "up"],
                     ["-n", r, "addr", "add", self.relay + "/24", "dev", "toclient"],
                     ["-n", r, "addr", "add", self.relay_inner + "/24", "dev", "tocompute"],
                     ["-n", c, "addr", "add", self.compute + "/24", "dev", "torelay"],
                     ["-n", r, "link", "set", "lo", "up"],
                     ["-n", r, "link", "set", "toclient", "up"],
                     ["-n", r, "link", "set", "tocompute", "up"],
                     ["-n", c, "link", "set", "lo", "up"],
                     ["-n", c, "link", "set", "torelay", "up"],
                     ["-n", c, "route", "add", "default", "via", self.relay_inner],
                     ["route", "add", self.compute_route, "via", self.relay]):
            subprocess.run(["ip"] + args, check=True, capture_output=True)
        subprocess.run(self.on_relay() + ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
                       check=True)

    def on_relay(self):
        """The words that run a program on the relay's host (nsenter into its network
        namespace only; the program keeps nsenter's process id)."""
        return ["nsenter", "--net=/run/netns/" + self.relay_ns]

    def on_compute(self):
        return ["nsenter", "--net=/run/netns/" + self.compute_ns]

    def remove(self):
        for args in (["route", "del", self.compute_route], ["netns", "del", self.relay_ns],
                     ["netns", "del", self.compute_ns], ["link", "del", self.link]):
            subprocess.run(["ip"] + args, capture_output=True)


MARIADB_USER, MARIADB_PASSWORD = b"bench", b"bench-pw"


def mariadbd_cmd(datadir, port):
    """A stock mariadbd on `datadir`, listening on loopback `port` only."""
    return ["/usr/sbin/mariadbd", "--no-defaults", "--user=root", "--datadir=" + datadir,
            "--socket=" + os.path.join(datadir, "mysqld.sock"), "--port=%d" % port,
            "--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin",
            "--innodb-buffer-pool-size=32M"]


def mariadbd_version():
    out = subprocess.run(["/usr/sbin/mariadbd", "--version"], capture_output=True, text=True)
    return out.stdout.split()[2]


def mariadb_relay(name, **kw):
    """A relay in switch mode in front of a stock mariadbd (the process driver) on a fresh data
    directory, with the account MARIADB_USER / MARIADB_PASSWORD (mysql_native_password).
    Returns (relay, datadir); the instance is running. More keyword arguments go to Relay."""
    import mysqlproto as m
    datadir = os.path.join(tmpdir(name + "-data"), "maria")
    subprocess.run(["mariadb-install-db", "--no-defaults", "--datadir=" + datadir, "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True)
    compute_port = free_port()
    driver = ('[instance.driver]\nkind = "process"\ncommand = [%s]\nstop_grace = "30s"\n'
              % ", ".join(json.dumps(a) for a in mariadbd_cmd(datadir, compute_port)))
    relay = Relay(name, compute_port=compute_port, driver=driver, auth="switch", **kw)
    # Wake once as root (empty password) to create the benchmark account.
    _, c = m.login("127.0.0.1", relay.port, b"root", b"")
    c.query(("CREATE USER %s@'%%' IDENTIFIED VIA mysql_native_password USING PASSWORD('%s')"
             % (MARIADB_USER.decode(), MARIADB_PASSWORD.decode())).encode())
    c.close()
    return relay, datadir


def ticket_key(dir_):
    """A fresh resumption-ticket key in `dir_`, for a compute that issues tickets."""
    path = os.path.join(dir_, "tickets.key")
    subprocess.run([os.path.join(BIN, "relay"), "keygen", "--id", "tickets", "--out", path],
                   check=True, capture_output=True)
    return path


def dual_mariadb_relay(name, instance_toml="", mariadbd_args=(), **kw):
    """A dual-mode relay in front of MariaDB with perceptron_dual (the process driver, a fresh
    data directory) that issues resumption tickets, with `resumable_sessions = true` and
    `instance_toml`; the instance is running, and root (empty password) logs in on the
    compute's own port only (every login through the relay is the relay's). `mariadbd_args`:
    more options for mariadbd. More keyword arguments go to Relay."""
    tmp = tmpdir(name + "-maria")
    plugins = os.path.join(tmp, "plugins")
    os.makedirs(plugins)
    shutil.copy(os.path.join(BIN, "libperceptron_dual.so"),
                os.path.join(plugins, "perceptron_dual.so"))
    # What a spliced resumable session holds is read from it (docs/kernel-splice.md).
    os.symlink("/usr/lib/mysql/plugin/metadata_lock_info.so",
               os.path.join(plugins, "metadata_lock_info.so"))
    datadir = os.path.join(tmp, "data")
    subprocess.run(["mariadb-install-db", "--no-defaults", "--datadir=" + datadir, "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True)
    port = free_port()
    cmd = mariadbd_cmd(datadir, port) + [
        "--plugin-dir=" + plugins, "--plugin-load-add=perceptron_dual.so",
        "--plugin-load-add=metadata_lock_info.so",
        "--loose-perceptron-dual-key-file={DIR}/perceptron.key",
        "--loose-perceptron-dual-ticket-key-file=" + ticket_key(tmp),
        "--loose-perceptron-dual-instance=demo"] + list(mariadbd_args)
    driver = ('[instance.driver]\nkind = "process"\ncommand = [%s]\nstop_grace = "30s"\n'
              % ", ".join(json.dumps(a) for a in cmd))
    relay = Relay(name, compute_port=port, driver=driver, auth="dual",
                  instance_toml='compute_proof = "login"\nresumable_sessions = true\n'
                                + instance_toml, **kw)
    relay.admin("POST", "/v1/instances/demo/resume")
    relay.wait_state("running", timeout=60)
    return relay


def ledger_seconds(relay, since=0.0):
    """Seconds spent in each state from the relay's ledger lines written at or after `since`
    (Unix seconds), up to now."""
    events = [e for e in ledger_events(relay) if e[0] >= since]
    spent = {}
    for (t, state), (t_next, _) in zip(events, events[1:] + [(time.time(), None)]):
        spent[state] = spent.get(state, 0.0) + (t_next - t)
    return spent


def ledger_events(relay):
    """The relay's ledger as (Unix seconds, state) pairs, oldest first."""
    events = []
    with open(os.path.join(relay.dir, "state", "usage.ledger")) as f:
        for line in f:
            parts = line.split()
            # Storage lines (`<ms> <instance> storage <local> <stored>`) are not states.
            if len(parts) >= 3 and parts[0].isdigit() and parts[2] != "storage":
                events.append((int(parts[0]) / 1000.0, parts[2]))
    return events


def add_user(data, bin_dir=None):
    subprocess.run([os.path.join(bin_dir or BIN, "server-shim"), "user", "add", USER.decode(), "--admin",
                    "--password-stdin", "--data", data], input=PASSWORD, check=True,
                   capture_output=True)


def kv(line):
    """key=value pairs of a tracing log line."""
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))


def tcpext(name):
    """A system-wide TcpExt counter from /proc/net/netstat (e.g. ListenOverflows)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for a, b in zip(lines[::2], lines[1::2]):
        if a.startswith("TcpExt:"):
            return int(dict(zip(a.split()[1:], b.split()[1:])).get(name, 0))
    return 0


def listen_backlog(port):
    """The accept backlog of the socket listening on 127.0.0.1:port (ss's Send-Q)."""
    out = subprocess.run(["ss", "-ltnH", "sport = :%d" % port], capture_output=True,
                         text=True).stdout.split()
    return int(out[2]) if len(out) > 2 else None
