#!/usr/bin/env python3
"""TLS on the client leg: paused instance → login OK, with and without TLS.

Contenders, alternated run by run (the order rotates every iteration), each against its own
relay with a paused server-shim instance (process driver), the same lean client:
  plain       no TLS.
  tls         [instance.tls] on the relay: SSLRequest, TLS 1.3 handshake verified against the
              test CA (Python's ssl, OpenSSL), then the login inside TLS; the relay terminates
              TLS, wakes the shim and relays the login over plaintext.
  handshake   the relay's greeting, SSLRequest and TLS handshake, then close: the TLS cost
              alone, no wake.

Between runs both instances are paused. The relay's own account of each cold login (its log
line: login_ms = greeting to login read, TLS included; wake_ms; compute_login_ms) is reported
beside the client's wall clock.

Usage: tls-login.py [N]   (default 50, the first 3 iterations are warm-up; the harness turns
the wake budgets off)
Writes bench/results/tls-login.{txt,json}.
"""

import os
import socket
import ssl
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mysqlproto as m  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50
WARMUP = 3
HOST = "127.0.0.1"


def certs(dir):
    def run(*args):
        subprocess.run(["openssl", *args], cwd=dir, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=bench CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    with open(os.path.join(dir, "ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext")
    os.chmod(os.path.join(dir, "server.key"), 0o600)
    return [os.path.join(dir, f) for f in ("ca.pem", "server.pem", "server.key")]


def handshake_only(port, ctx):
    t0 = time.perf_counter()
    s = socket.create_connection((HOST, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + (buf[0] | buf[1] << 8 | buf[2] << 16):
        buf += s.recv(4096)
    s.sendall(m.packet(1, struct.pack("<IIB23x", m.CAPS | m.CLIENT_SSL, 1 << 24, 45)))
    t = ctx.wrap_socket(s, server_hostname=HOST)
    dt = time.perf_counter() - t0
    t.close()
    return dt


def relay_timings(relay, local_port):
    client = "client=127.0.0.1:%d " % local_port
    for line in relay.log_lines():
        if "relayed login accepted" in line and client in line:
            kv = h.kv(line)
            return {k: float(kv[k]) for k in ("login_ms", "wake_ms", "compute_login_ms",
                                              "total_ms") if k in kv}
    return {}


def main():
    plain = h.Relay("tls-login-plain")
    ca, cert, key = certs(plain.dir)
    tls = h.Relay("tls-login-tls",
                  instance_toml='[instance.tls]\ncert = "%s"\nkey = "%s"\n' % (cert, key))
    ctx = ssl.create_default_context(cafile=ca)
    res = {"plain": [], "tls": [], "handshake": []}
    phases = {"plain": [], "tls": []}

    def cold(name, relay, context):
        relay.pause()
        dt, c = m.login(HOST, relay.port, h.USER, h.PASSWORD, tls=context)
        port = c.local_port
        c.close()
        deadline = time.time() + 5
        timings = relay_timings(relay, port)
        while not timings and time.time() < deadline:  # the relay's line follows the OK
            time.sleep(0.005)
            timings = relay_timings(relay, port)
        return dt, timings

    order = ["plain", "tls", "handshake"]
    for i in range(N + WARMUP):
        for name in order[i % 3:] + order[:i % 3]:
            if name == "handshake":
                tls.pause()
                dt, ph = handshake_only(tls.port, ctx), None
            else:
                dt, ph = cold(name, plain if name == "plain" else tls,
                              None if name == "plain" else ctx)
            if i >= WARMUP:
                res[name].append(dt)
                if ph:
                    phases[name].append(ph)

    lines = ["TLS on the client leg: paused server-shim instance → login OK (lean client)",
             "machine: %s" % h.machine(), "binaries: %s" % h.BIN, ""]
    data = {"n": N, "results": {}, "phases": {}}
    for name in ("plain", "tls", "handshake"):
        s = h.summary(res[name], 1000)
        data["results"][name] = s
        lines.append("%-10s %s" % (name, h.fmt(s)))
    lines.append("")
    lines.append("relay's own account (medians, ms): login_ms (greeting → login read, TLS "
                 "included), wake_ms, compute_login_ms, total_ms")
    for name in ("plain", "tls"):
        med = {k: h.summary([p[k] for p in phases[name] if k in p]).get("median")
               for k in ("login_ms", "wake_ms", "compute_login_ms", "total_ms")}
        data["phases"][name] = med
        lines.append("%-10s %s" % (name, "  ".join("%s %s" % kv for kv in med.items())))
    mp, mt = data["results"]["plain"]["median"], data["results"]["tls"]["median"]
    lines += ["", "tls / plain (median): %.2f ×, +%.2f ms" % (mt / mp, mt - mp)]
    h.save("tls-login", "\n".join(lines) + "\n", data)


if __name__ == "__main__":
    try:
        main()
    finally:
        h.stop_all()
