#!/usr/bin/env python3
"""Scenario 16, resumable sessions (docs/parking.md, "Sessions across a stop").

Part A, stopped → first answer: one relayed session with a setting (`SET SESSION sql_mode`);
the instance parks it and stops the compute under it (idle_pause_after and stop_after short);
then `SELECT 2` on the detached session: the relay wakes the instance, reattaches the session
with its ticket, restores the setting (read from the compute by value), and forwards the query. Next to it, the same query on
the running instance right after. On server-shim and on MariaDB with perceptron_dual.

Part B, the relay's memory per detached session: S sessions opened against a paused instance
(relayed, each holding a ticket) and detached by a stop; the relay's RSS before and after,
divided by S. Every session is checked to answer afterwards.

Part C, the bill: a pool of P sessions opened while the instance runs (as applications open
their pools; with resumable_sessions every login is the relay's), each with a setting of its
own, idle for one compressed hour with a ping per connection every 30 s (scaled), idle_pause_after 5 min, park_after 10 s and stop_after 5 min
(scaled), next to
the bill of the same hour always on (1 CCU for the hour: what an instance held running by
its pool costs). CCU-seconds from the relay's own usage API (frozen_rate_ccu = 0).

Usage: resume.py [N] [SESSIONS] [SCALE]   (default 30, 200, 60)
Writes bench/results/resume.{txt,json}. Needs root and cgroups (the freezer).
"""

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
SESSIONS = int(sys.argv[2]) if len(sys.argv) > 2 else 200
SCALE = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
POOL = 10
PING = b"\x01\x00\x00\x00\x0e"
MARIA_USER, MARIA_PASSWORD = b"bench", b"bench-pw"


def shim_relay(name, idle, stop_after, park_after=None):
    """A relay whose server-shim issues tickets (a ticket key of its own)."""
    key = h.ticket_key(h.tmpdir(name + "-tickets"))
    extra = 'park_after = "%s"\n' % park_after if park_after else ""
    return h.Relay(name, idle_pause_after=idle,
                   shim_args=["--ticket-key-file", key, "--instance", "demo"],
                   instance_toml='stop_after = "%s"\nresumable_sessions = true\n%s' % (
                       stop_after, extra))


def maria_relay(name, idle, stop_after):
    """A dual-mode relay in front of MariaDB with perceptron_dual issuing tickets, and the
    account bench (IDENTIFIED VIA perceptron_dual)."""
    relay = h.dual_mariadb_relay(name, idle_pause_after=idle,
                                 instance_toml='stop_after = "%s"\n' % stop_after)
    # Every login of a resumable instance is the relay's: root sets up on the compute itself.
    _, c = m.login("127.0.0.1", relay.compute_port, b"root", b"")
    c.query(("CREATE USER bench@'%%' IDENTIFIED VIA perceptron_dual USING PASSWORD('%s')"
             % MARIA_PASSWORD.decode()).encode())
    c.close()
    return relay


def stopped_to_answer(relay, user, password):
    """SELECT 2 on a detached session (the compute stopped under it) and then on the running
    instance, N times each."""
    times = {"stopped": [], "running": []}
    relay.wait_state("paused", timeout=120)
    c = m.Conn("127.0.0.1", relay.port, user, password)
    c.query(b"SET SESSION sql_mode = 'ANSI_QUOTES'")
    reattached0 = relay.metric('relay_connections_total{instance="demo",outcome="reattached"}')
    for i in range(N + 2):
        relay.wait_state("paused", timeout=120)
        t0 = time.perf_counter()
        c.query(b"SELECT 2")
        stopped = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        c.query(b"SELECT 2")
        running = (time.perf_counter() - t0) * 1000
        if i >= 2:
            times["stopped"].append(stopped)
            times["running"].append(running)
    mode = c.value(b"SELECT @@SESSION.sql_mode")
    reattached = relay.metric('relay_connections_total{instance="demo",outcome="reattached"}')
    c.close()
    # The relay's own account of each reattach: how long its wake took, and the whole.
    with open(relay.log, errors="replace") as f:
        for line in f:
            if "session reattached" in line:
                fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
                times.setdefault("relay_wake", []).append(float(fields["wake_ms"]))
                times.setdefault("relay_total", []).append(float(fields["total_ms"]))
    assert reattached - reattached0 == N + 2, "every stopped query reattached"
    assert mode == b"ANSI_QUOTES", "the setting came along: %r" % mode
    return times


def relayed_sessions(relay, count):
    """`count` sessions that each logged in through the relay (so hold a ticket): logins in
    batches while the instance is paused; the ones that went direct are closed."""
    sessions = []
    while len(sessions) < count:
        relay.wait_state("paused", timeout=120)
        before = relay.metric('relay_connections_total{instance="demo",outcome="relayed"}')
        batch, lock = [], threading.Lock()

        def one():
            c = m.Conn("127.0.0.1", relay.port, h.USER, h.PASSWORD)
            with lock:
                batch.append(c)
        threads = [threading.Thread(target=one) for _ in range(min(20, count - len(sessions)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        relayed = int(relay.metric('relay_connections_total{instance="demo",outcome="relayed"}')
                      - before)
        # Which ones were relayed is not visible to the client: keep the batch only if all were.
        if relayed == len(batch):
            sessions += batch
        else:
            for c in batch:
                c.close()
    return sessions


def pool_opened_while_running(relay, count):
    """`count` sessions opened on the running instance, each checked to be relayed."""
    if relay.state() != "running":
        status, body = relay.admin("POST", "/v1/instances/demo/resume")
        assert status == 200, body
    relay.wait_state("running", timeout=120)
    before = relay.metric('relay_connections_total{instance="demo",outcome="relayed"}')
    pool = [m.Conn("127.0.0.1", relay.port, h.USER, h.PASSWORD) for _ in range(count)]
    relayed = relay.metric('relay_connections_total{instance="demo",outcome="relayed"}') - before
    assert relayed == count, "every login of a resumable instance is relayed (%d)" % relayed
    return pool


def memory_per_session(relay):
    """The marginal cost: RSS with S detached sessions, then with 2S (the first S warm the
    allocator and the relay's buffer pools, which RSS never gives back)."""
    first = relayed_sessions(relay, SESSIONS)
    relay.wait_state("paused", timeout=120)
    rss1 = h.rss_kib(relay.proc.pid)
    second = relayed_sessions(relay, SESSIONS)
    relay.wait_state("paused", timeout=120)
    rss2 = h.rss_kib(relay.proc.pid)
    answered = 0
    for i, c in enumerate(first + second):
        answered += c.value(b"SELECT %d" % (i + 1000)) == b"%d" % (i + 1000)
        c.close()
    assert answered == 2 * SESSIONS, "every detached session answered"
    return {"sessions": SESSIONS, "rss_before_kib": rss1, "rss_after_kib": rss2,
            "bytes_per_session": round((rss2 - rss1) * 1024 / SESSIONS)}


def idle_hour():
    hour, every = 3600.0 / SCALE, 30.0 / SCALE
    five_min = "%dms" % int(300_000 / SCALE)
    # The default park_after (10 s), scaled.
    relay = shim_relay("resume-bill", five_min, five_min, "%dms" % int(10_000 / SCALE))
    try:
        pool = pool_opened_while_running(relay, POOL)
        for i, c in enumerate(pool):
            c.query(b"SET SESSION time_zone = '+%02d:00'" % i)
        _, body = relay.admin("GET", "/v1/usage")
        start_ccu = sum(r.get("ccu_seconds", 0.0) for r in json.loads(body))
        t_start = time.time()
        t_end = t_start + hour
        while time.time() < t_end:
            tick = time.time()
            for c in pool:
                c.sock.sendall(PING)
                _, p = c.read_packet()
                assert p and p[0] == 0x00, p
            time.sleep(max(0.0, every - (time.time() - tick)))
        _, body = relay.admin("GET", "/v1/usage")
        ccu = sum(r.get("ccu_seconds", 0.0) for r in json.loads(body)) - start_ccu
        spent = {k: round(v, 2) for k, v in h.ledger_seconds(relay, t_start).items()}
        t0 = time.perf_counter()
        three = pool[0].value(b"SELECT 3")
        first_ms = (time.perf_counter() - t0) * 1000
        assert three == b"3", three
        # Every connection answers afterwards, on its own session.
        for i, c in enumerate(pool):
            zone = c.value(b"SELECT @@time_zone")
            assert zone == b"+%02d:00" % i, (i, zone)
        with open(relay.log, errors="replace") as f:
            stopped = f.read().count("stopping the frozen compute under resumable sessions")
        for c in pool:
            c.close()
        return {"hour_s": hour, "ccu_seconds": round(ccu, 3), "seconds_by_state": spent,
                "always_on_ccu_seconds": hour, "ratio": ccu / hour,
                "stops_under_sessions": stopped, "first_query_ms": round(first_ms, 2)}
    finally:
        relay.stop()


def main():
    shim = shim_relay("resume-shim", "1s", "200ms")
    try:
        shim_times = stopped_to_answer(shim, h.USER, h.PASSWORD)
        memory = memory_per_session(shim)
    finally:
        shim.stop()
    maria = maria_relay("resume-maria", "1s", "200ms")
    try:
        maria_times = stopped_to_answer(maria, MARIA_USER, MARIA_PASSWORD)
    finally:
        maria.stop()
    bill = idle_hour()
    s_stopped, s_running = h.summary(shim_times["stopped"]), h.summary(shim_times["running"])
    m_stopped, m_running = h.summary(maria_times["stopped"]), h.summary(maria_times["running"])
    lines = [
        "# Resumable sessions: a session across its compute's stop",
        "machine: %s" % h.machine(),
        "",
        "## Part A: SELECT 2 on a session whose compute was stopped (wake, reattach with the "
        "ticket, restore of one setting by value, answer), then on the running instance; n=%d each" % N,
        "server-shim",
        "  stopped → answer: %s" % h.fmt(s_stopped),
        "  running:          %s" % h.fmt(s_running),
        "  the relay's log: wake %s; wake + reattach + restore %s" % (
            h.fmt(h.summary(shim_times["relay_wake"])),
            h.fmt(h.summary(shim_times["relay_total"]))),
        "MariaDB %s with perceptron_dual" % h.mariadbd_version(),
        "  stopped → answer: %s" % h.fmt(m_stopped),
        "  running:          %s" % h.fmt(m_running),
        "  the relay's log: wake %s; wake + reattach + restore %s" % (
            h.fmt(h.summary(maria_times["relay_wake"])),
            h.fmt(h.summary(maria_times["relay_total"]))),
        "",
        "## Part B: the relay's memory per detached session (server-shim)",
        "  %d more detached sessions (each answered afterwards): RSS %d → %d KiB, %d bytes "
        "per session" % (
            memory["sessions"], memory["rss_before_kib"], memory["rss_after_kib"],
            memory["bytes_per_session"]),
        "",
        "## Part C: %d sessions idle for one hour compressed %gx (%.0f s), a ping per connection "
        "every 30 s (scaled), idle_pause_after and stop_after 5 min, park_after 10 s (scaled)" % (
            POOL, SCALE, 3600 / SCALE),
        "  CCU-seconds: %.3f; always on: %.1f; ratio %.4f; stops under the sessions: %d; "
        "first query after the hour: %.2f ms" % (
            bill["ccu_seconds"], bill["always_on_ccu_seconds"], bill["ratio"],
            bill["stops_under_sessions"], bill["first_query_ms"]),
        "  seconds by state after the pool's first use: %s" % json.dumps(
            bill["seconds_by_state"], sort_keys=True),
    ]
    h.save("resume", "\n".join(lines) + "\n",
           {"shim_ms": shim_times, "mariadb_ms": maria_times, "memory": memory, "bill": bill,
            "summary": {"shim_stopped": s_stopped, "shim_running": s_running,
                        "mariadb_stopped": m_stopped, "mariadb_running": m_running},
            "scale": SCALE})


if __name__ == "__main__":
    try:
        main()
    finally:
        h.stop_all()
