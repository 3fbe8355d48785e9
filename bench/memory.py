#!/usr/bin/env python3
"""Scenario 3, memory: RSS of the relay and of HAProxy holding idle forwarded connections, in
two states: still before their login (the greeting read, nothing sent), and logged in.

The compute is a server-shim with the bench account (its handshake and idle timeouts set to
an hour, so it never closes one of them). The relay uses an exec driver whose
start/stop/status are `true`, so it adopts the running shim and every connection takes the
direct route (raw L4 forwarding, like HAProxy in TCP mode). A second relay contender,
relay-held, has `resumable_sessions = true`: the relay greets and relays every login itself
and holds each session (the perceptron route, a held connection's whole state). The relay's
pre-login caps
(max_pending_connections, max_pending_per_source, the instance's max_pending_connections) are
raised above N_MAX for the "before login" phase: this measures memory, not the caps (before,
the benchmark ran into the per-source cap of 1,024 and counted 1,976 ERR packets as held
connections).

Every connection is checked, not assumed: before login, each must have received a whole
HandshakeV10 (first payload byte 0x0a, not an ERR) and still be open, with nothing more
received, when RSS is read; logged in, each must have received the OK of a lean
mysql_native_password login and then answer a COM_PING with OK after RSS is read. A run
whose connections do not check out is reported as such and left out of the medians.

Per run (fresh proxy process each time): VmRSS idle (after 10 warm-up connections were
opened and closed), with 1,000 connections, and with N_MAX connections; bytes per connection
= (RSS_n − RSS_idle) / n. Contenders and phases alternate run by run.

N_MAX is 10,000, or less when the hard RLIMIT_NOFILE does not allow a proxy 2·N + slack
descriptors (this script cannot raise the hard limit without CAP_SYS_RESOURCE).

Usage: memory.py [RUNS] [CONTENDERS]   (default 3 runs; contenders a comma-separated subset of
relay,relay-held,haproxy, default all three)
Writes bench/results/memory.{txt,json}.
"""

import os
import resource
import select
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
N_MAX = min(10000, (HARD - 200) // 2 // 100 * 100)
STEPS = [1000, N_MAX]
resource.setrlimit(resource.RLIMIT_NOFILE, (HARD, HARD))


def haproxy(port, backend):
    """HAProxy in TCP mode with room for N_MAX connections."""
    d = h.tmpdir("haproxy")
    cfg = os.path.join(d, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write("""global
    maxconn %d
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend fe
    bind 127.0.0.1:%d
    maxconn %d
    default_backend be
backend be
    server s1 127.0.0.1:%d maxconn %d
""" % (N_MAX + 50, port, N_MAX + 50, backend, N_MAX + 50))
    p = h.start(["haproxy", "-db", "-f", cfg], stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(d, "haproxy.log"), "w"))
    return p


def wait_port(port):
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.01)


def read_packet(s):
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            raise RuntimeError("closed before a whole packet")
        head += chunk
    n = head[0] | head[1] << 8 | head[2] << 16
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        if not chunk:
            raise RuntimeError("closed inside a packet")
        body += chunk
    return body


class Held:
    """An open connection through the proxy: a socket before its login, or a logged-in Conn."""

    def __init__(self, port, phase):
        self.phase = phase
        if phase == "login":
            _, self.conn = m.login("127.0.0.1", port, h.USER, h.PASSWORD, timeout=30)
            self.sock = self.conn.sock
        else:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            greeting = read_packet(self.sock)
            if greeting[:1] != b"\x0a":
                raise RuntimeError("not a greeting: %r" % greeting[:40])

    def close(self):
        self.sock.close()


def open_conns(port, n, held, phase):
    for _ in range(n):
        held.append(Held(port, phase))


def still_held(held):
    """How many of `held` are still open and forwarded: before login, nothing arrived (no ERR,
    no close) since the greeting; logged in, a COM_PING is answered with OK."""
    if held and held[0].phase == "greeting":
        poll = select.poll()
        for c in held:
            poll.register(c.sock, select.POLLIN)
        readable = {fd for fd, _ in poll.poll(0)}
        return sum(1 for c in held if c.sock.fileno() not in readable)
    ok = 0
    for c in held:
        try:
            c.sock.sendall(m.packet(0, b"\x0e"))   # COM_PING
            if read_packet(c.sock)[:1] == b"\x00":
                ok += 1
        except (OSError, RuntimeError):
            pass
    return ok


def measure(kind, phase, shim_port, key, tickets):
    if kind in ("relay", "relay-held"):
        caps = N_MAX + 100
        common = dict(
            nofile=HARD,
            # Longer than a phase takes (a few minutes at most); the relay refuses more than
            # 10 min with the resume and compute timeouts in dual mode.
            handshake_timeout="9m",
            relay_toml="max_pending_connections = %d\nmax_pending_per_source = %d\n"
            % (caps, caps))
        if kind == "relay":
            # The shim's key: the relay adopts only a compute that proves it.
            r = h.Relay("memory", compute_port=shim_port, driver="adopt", key_file=key,
                        instance_toml="max_pending_connections = %d\n" % caps, **common)
        else:
            # Every login relayed and its session held by the relay (resumable sessions,
            # which need the process driver: the relay runs its own shim).
            r = h.Relay("memory-held", instance_toml=(
                'max_pending_connections = %d\nresumable_sessions = true\nstop_after = "1h"\n'
                % caps), shim_args=("--handshake-timeout", "1h", "--idle-timeout", "1h",
                                    "--ticket-key-file", tickets, "--instance", "demo"),
                **common)
            r.admin("POST", "/v1/instances/demo/resume")
        r.wait_state("running")
        proc, port = r.proc, r.port
    else:
        port = h.free_port()
        proc = haproxy(port, shim_port)
        wait_port(port)
    held = []
    open_conns(port, 10, held, phase)
    for c in held:
        c.close()
    held.clear()
    time.sleep(0.5)
    rss = {0: h.rss_kib(proc.pid)}
    verified = {}
    opened = 0
    for n in STEPS:
        open_conns(port, n - opened, held, phase)
        opened = n
        time.sleep(1.0)
        rss[n] = h.rss_kib(proc.pid)
        verified[n] = still_held(held)
    for c in held:
        c.close()
    if kind != "haproxy":
        r.stop()
    else:
        h.stop(proc)
    time.sleep(0.5)
    return rss, verified


PHASES = ["greeting", "login"]
ALL_CONTENDERS = ["relay", "relay-held", "haproxy"]
CONTENDERS = sys.argv[2].split(",") if len(sys.argv) > 2 else ALL_CONTENDERS
if not CONTENDERS or not set(CONTENDERS) <= set(ALL_CONTENDERS):
    sys.exit("memory.py: CONTENDERS is a comma-separated subset of %s" % ",".join(ALL_CONTENDERS))
PHASE_NAMES = {"greeting": "before login (greeting read)", "login": "logged in (idle)"}


def main():
    shim_port = h.free_port()
    d = h.tmpdir("memory-shim")
    data = os.path.join(d, "data")
    h.add_user(data)
    key = os.path.join(d, "perceptron.key")
    subprocess.run([os.path.join(h.BIN, "relay"), "keygen", "--id", "bench", "--out", key],
                   check=True, capture_output=True)
    tickets = os.path.join(d, "tickets.key")
    subprocess.run([os.path.join(h.BIN, "relay"), "keygen", "--id", "tickets", "--out", tickets],
                   check=True, capture_output=True)
    shim = h.start(h.Relay.shim_cmd(shim_port, data, key) +
                   ["--handshake-timeout", "1h", "--idle-timeout", "1h",
                    "--ticket-key-file", tickets, "--instance", "demo"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m.wait_greeting("127.0.0.1", shim_port, time.perf_counter() + 20)
    runs = []
    order = [(k, p) for p in PHASES for k in CONTENDERS]
    for i in range(RUNS):
        k = i % len(order)
        for kind, phase in order[k:] + order[:k]:
            rss, verified = measure(kind, phase, shim_port, key, tickets)
            runs.append({"run": i, "contender": kind, "phase": phase, "rss_kib": rss,
                         "verified": verified, "complete": all(verified[n] == n for n in STEPS),
                         "bytes_per_conn": {n: (rss[n] - rss[0]) * 1024 / n for n in STEPS}})
            print("run %d %s %s: verified %s" % (i, kind, phase, verified), flush=True)
    h.stop(shim)

    out = ["# memory: idle connections (the relay's direct route, the relay holding every "
           "session, HAProxy TCP mode), %d runs each, before login and logged in" % RUNS, "machine: %s" % h.machine(),
           "hard RLIMIT_NOFILE %d -> largest step %d connections" % (HARD, N_MAX), "",
           "per run: VmRSS KiB idle / @1000 / @%d, bytes per connection @1000 / @%d, "
           "connections verified held @1000 / @%d" % (N_MAX, N_MAX, N_MAX)]
    for r in runs:
        out.append("  run %d %-10s %-8s %7d / %7d / %7d KiB   %7.0f / %7.0f B/conn   "
                   "verified %d/1000, %d/%d%s" % (
                       r["run"], r["contender"], r["phase"], r["rss_kib"][0],
                       r["rss_kib"][1000], r["rss_kib"][N_MAX], r["bytes_per_conn"][1000],
                       r["bytes_per_conn"][N_MAX], r["verified"][1000], r["verified"][N_MAX],
                       N_MAX, "" if r["complete"] else "  INCOMPLETE: left out"))
    out += ["", "medians over the runs whose every connection was verified:"]
    med = {}
    for phase in PHASES:
        out.append("  %s:" % PHASE_NAMES[phase])
        for kind in CONTENDERS:
            rs = [r for r in runs if r["contender"] == kind and r["phase"] == phase
                  and r["complete"]]
            key = "%s/%s" % (kind, phase)
            med[key] = {n: h.summary([r["bytes_per_conn"][n] for r in rs]) for n in STEPS}
            med[key]["rss"] = {n: h.summary([r["rss_kib"][n] for r in rs]) for n in [0] + STEPS}
            if not rs:
                out.append("    %-10s no complete run" % kind)
                continue
            out.append("    %-10s RSS idle %6.0f KiB, @1000 %6.0f KiB, @%d %6.0f KiB; bytes/conn "
                       "@1000 %6.0f (min %.0f max %.0f), @%d %6.0f (min %.0f max %.0f); n=%d" % (
                           kind, med[key]["rss"][0]["median"], med[key]["rss"][1000]["median"],
                           N_MAX, med[key]["rss"][N_MAX]["median"],
                           med[key][1000]["median"], med[key][1000]["min"],
                           med[key][1000]["max"], N_MAX, med[key][N_MAX]["median"],
                           med[key][N_MAX]["min"], med[key][N_MAX]["max"], len(rs)))
    out.append("")
    for phase in PHASES if "haproxy" in CONTENDERS else []:
        hap = med["haproxy/" + phase][N_MAX]
        for kind in (k for k in CONTENDERS if k != "haproxy"):
            rel = med["%s/%s" % (kind, phase)][N_MAX]
            if rel.get("n") and hap.get("n"):
                rb = rel["median"]
                out.append("%s, %s: / HAProxy bytes per connection @%d: %.2fx (%s); target <= "
                           "8 KiB (8192 B): %s (%.0f B)" % (
                               PHASE_NAMES[phase], kind, N_MAX, rb / hap["median"],
                               "at or below HAProxy's" if rb <= hap["median"] else "above",
                               "MET" if rb <= 8192 else "MISSED", rb))
    out.append("")
    h.save("memory", "\n".join(out), {"n_max": N_MAX, "runs": runs, "medians": med})


if __name__ == "__main__":
    main()
