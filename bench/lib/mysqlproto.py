"""A lean MySQL client for benchmarks: raw sockets, mysql_native_password by hand.

PyMySQL adds tens of milliseconds per connect (docs/architecture.md §5); this adds well under a
millisecond. It speaks just enough of the protocol for the benchmarks: the greeting, a
HandshakeResponse41 with mysql_native_password (and one auth switch, if asked), COM_QUERY
with a text result set read to its end, and COM_QUIT.

Blocking (`login`, `Conn`) and asyncio (`alogin`) variants share the packet code.
"""

import hashlib
import socket
import struct
import time

CLIENT_LONG_PASSWORD = 0x1
CLIENT_LONG_FLAG = 0x4
CLIENT_CONNECT_WITH_DB = 0x8
CLIENT_PROTOCOL_41 = 0x200
CLIENT_TRANSACTIONS = 0x2000
CLIENT_SECURE_CONNECTION = 0x8000
CLIENT_MULTI_RESULTS = 0x20000
CLIENT_PLUGIN_AUTH = 0x80000
CLIENT_SSL = 0x800

CAPS = (CLIENT_LONG_PASSWORD | CLIENT_LONG_FLAG | CLIENT_PROTOCOL_41 | CLIENT_TRANSACTIONS
        | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_RESULTS | CLIENT_PLUGIN_AUTH)


class LoginError(Exception):
    """The server answered the login with an ERR packet (or something unexpected)."""


def native_password(password: bytes, scramble: bytes) -> bytes:
    """SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw)))."""
    if not password:
        return b""
    h1 = hashlib.sha1(password).digest()
    h2 = hashlib.sha1(h1).digest()
    h3 = hashlib.sha1(scramble + h2).digest()
    return bytes(a ^ b for a, b in zip(h1, h3))


def parse_greeting(p: bytes) -> bytes:
    """Returns the 20-byte scramble of a HandshakeV10 payload."""
    if not p or p[0] == 0xFF:
        raise LoginError("server refused the connection: %r" % p[:80])
    if p[0] != 10:
        raise LoginError("not a HandshakeV10 greeting")
    i = p.index(b"\0", 1) + 1          # server version
    i += 4                             # connection id
    part1 = p[i:i + 8]
    i += 8 + 1                         # filler
    i += 2 + 1 + 2 + 2                 # caps low, charset, status, caps high
    auth_len = p[i]
    i += 1 + 10                        # reserved
    n2 = max(13, auth_len - 8)
    part2 = p[i:i + n2].rstrip(b"\0")
    return part1 + part2[:12]


def handshake_response(user: bytes, token: bytes, db: bytes = b"") -> bytes:
    caps = CAPS | (CLIENT_CONNECT_WITH_DB if db else 0)
    out = struct.pack("<IIB23x", caps, 1 << 24, 45)
    out += user + b"\0" + bytes([len(token)]) + token
    if db:
        out += db + b"\0"
    out += b"mysql_native_password\0"
    return out


def packet(seq: int, payload: bytes) -> bytes:
    return struct.pack("<I", len(payload))[:3] + bytes([seq & 0xFF]) + payload


def err_text(p: bytes) -> str:
    if p and p[0] == 0xFF:
        code = struct.unpack("<H", p[1:3])[0]
        return "ERR %d %s" % (code, p[9:].decode(errors="replace"))
    return "unexpected packet %r" % p[:40]


class Conn:
    """A blocking connection (login in the constructor)."""

    def __init__(self, host, port, user, password, db=b"", timeout=30.0, tls=None, source=None):
        """`tls`: an `ssl.SSLContext`; the login then goes inside TLS after an SSLRequest.
        `source`: the local address to connect from (another loopback address)."""
        # Wall-clock marks (time.time(), comparable with the relay's log timestamps).
        self.wall = {"connect": time.time()}
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = self.sock.getsockname()[1]
        self.buf = b""
        seq, greeting = self.read_packet()
        self.wall["greeting"] = time.time()
        scramble = parse_greeting(greeting)
        if tls is not None:
            seq += 1
            self.sock.sendall(packet(seq, struct.pack("<IIB23x", CAPS | CLIENT_SSL, 1 << 24, 45)))
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
            self.wall["tls"] = time.time()
        self.sock.sendall(packet(seq + 1, handshake_response(
            user, native_password(password, scramble), db)))
        self.wall["login_sent"] = time.time()
        seq, reply = self.read_packet()
        if reply and reply[0] == 0xFE:          # auth switch request
            i = reply.index(b"\0", 1)
            plugin, data = reply[1:i], reply[i + 1:].rstrip(b"\0")
            if plugin != b"mysql_native_password":
                raise LoginError("switch to unsupported plugin %r" % plugin)
            self.sock.sendall(packet(seq + 1, native_password(password, data[:20])))
            seq, reply = self.read_packet()
        if not reply or reply[0] != 0x00:
            self.sock.close()
            raise LoginError(err_text(reply))
        self.wall["ok"] = time.time()

    def _fill(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise LoginError("connection closed by peer")
            self.buf += chunk

    def read_packet(self):
        self._fill(4)
        n = self.buf[0] | self.buf[1] << 8 | self.buf[2] << 16
        seq = self.buf[3]
        self._fill(4 + n)
        p = self.buf[4:4 + n]
        self.buf = self.buf[4 + n:]
        return seq, p

    def rows(self, sql: bytes):
        """Runs a text query; yields its rows as raw packets (none for an OK). Consume it
        whole: the connection is in the middle of the result set until then."""
        self.sock.sendall(packet(0, b"\x03" + sql))
        _, p = self.read_packet()
        if p[0] == 0x00:
            return
        if p[0] == 0xFF:
            raise LoginError(err_text(p))
        # column count, column definitions, EOF, rows, EOF (no CLIENT_DEPRECATE_EOF)
        while True:
            _, p = self.read_packet()
            if p[0] == 0xFE and len(p) < 9:
                break
        while True:
            _, p = self.read_packet()
            if p[0] == 0xFE and len(p) < 9:
                return
            if p[0] == 0xFF:
                raise LoginError(err_text(p))
            yield p

    def query(self, sql: bytes) -> int:
        """Runs a text query; returns the number of rows read (result set fully consumed)."""
        return sum(1 for _ in self.rows(sql))

    def value(self, sql: bytes):
        """Runs a text query; returns the first column of its first row (None for NULL or
        no row), the result set fully consumed."""
        first = None
        for row in self.rows(sql):
            if first is None:
                first = row
        if first is None or first[0] == 0xFB:
            return None
        # A length-encoded string; values here are short (one length byte).
        return first[1:1 + first[0]]

    def close(self):
        try:
            self.sock.sendall(packet(0, b"\x01"))
        except OSError:
            pass
        self.sock.close()


def login(host, port, user, password, db=b"", timeout=30.0, tls=None):
    """Connect → OK. Returns (seconds from before connect() until the OK was read, Conn)."""
    t0 = time.perf_counter()
    c = Conn(host, port, user, password, db, timeout, tls)
    return time.perf_counter() - t0, c


async def alogin(host, port, user, password, timeout=60.0):
    """asyncio variant of `login`: returns seconds connect → OK; closes with COM_QUIT."""
    import asyncio

    async def read_packet(r):
        h = await r.readexactly(4)
        n = h[0] | h[1] << 8 | h[2] << 16
        return h[3], await r.readexactly(n)

    async def run():
        t0 = time.perf_counter()
        r, w = await asyncio.open_connection(host, port)
        try:
            seq, greeting = await read_packet(r)
            scramble = parse_greeting(greeting)
            w.write(packet(seq + 1, handshake_response(user, native_password(password, scramble))))
            seq, reply = await read_packet(r)
            if reply and reply[0] == 0xFE:
                i = reply.index(b"\0", 1)
                w.write(packet(seq + 1, native_password(password, reply[i + 1:i + 21])))
                seq, reply = await read_packet(r)
            if not reply or reply[0] != 0x00:
                raise LoginError(err_text(reply))
            dt = time.perf_counter() - t0
            w.write(packet(0, b"\x01"))
            return dt
        finally:
            w.close()

    return await asyncio.wait_for(run(), timeout)


def wait_greeting(host, port, deadline, poll=0.0005):
    """Polls until the port greets like MySQL; returns the time it first did (perf_counter)."""
    while True:
        try:
            s = socket.create_connection((host, port), timeout=1.0)
            try:
                h = s.recv(4)
                if len(h) == 4:
                    return time.perf_counter()
            finally:
                s.close()
        except OSError:
            pass
        if time.perf_counter() > deadline:
            raise TimeoutError("no greeting on %s:%d" % (host, port))
        time.sleep(poll)
