#!/usr/bin/env python3
"""Regenerate the conversation fixtures in fixtures/: real clients talking to a real mariadbd
through a recording TCP proxy, after their login.

Each *.trace file holds, one per line:
  caps 0x<hex>       the capabilities both sides set (client flags & server flags)
  mariadb_caps 0x<hex>  the same for MariaDB's extended capabilities
  status 0x<hex>     the status flags of the login's OK
  C <hex> / S <hex>  a chunk of bytes as the proxy read it from the client / the server
  idle               the client library returned from a command: every response is complete
The login (up to the server's first OK) is not written. `# ...` lines are comments. A trace
that ends without `idle` ends with the client's COM_QUIT.

How to run (needs mariadbd, PyMySQL, mysql-connector-python):
    mariadb-install-db --datadir=/tmp/cv-db --auth-root-authentication-method=normal
    mariadbd --no-defaults --datadir=/tmp/cv-db --socket=/tmp/cv-db/sock \
        --port=PORT --bind-address=127.0.0.1 --user=root --local-infile=1 &
    python3 capture.py --port PORT
"""
import argparse, os, socket, struct, subprocess, tempfile, threading

import mysql.connector
import pymysql
from pymysql.constants import CLIENT

MARIADB_CLIENT_CACHE_METADATA = 1 << 4
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


class Recorder:
    """A one-connection TCP proxy that records both directions after the login."""

    def __init__(self, server_port, mask_cache_metadata=False):
        self.server_port = server_port
        self.mask_cache_metadata = mask_cache_metadata
        self.lines, self.lock = [], threading.Lock()
        self.logged_in = False
        self.server_caps = self.client_caps = self.status = None
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        client, _ = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.server_port))
        threading.Thread(target=self.pump, args=(client, server, "C"), daemon=True).start()
        self.pump(server, client, "S")

    def pump(self, src, dst, tag):
        packets = 0
        while True:
            try:
                chunk = src.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                dst.close()
                return
            with self.lock:
                if not self.logged_in:
                    # The login: the greeting (server caps), the client's response (client
                    # caps), then the server's packets up to an OK.
                    if tag == "S" and packets == 0:
                        p = chunk[4:]
                        pos = p.index(b"\0", 1) + 1 + 4 + 8 + 1
                        lo = struct.unpack_from("<H", p, pos)[0]
                        hi = struct.unpack_from("<H", p, pos + 5)[0]
                        self.server_caps = lo | hi << 16
                        # MariaDB's extended capabilities: the last 4 of the 10 reserved bytes.
                        ext_at = 4 + pos + 5 + 2 + 1 + 6
                        self.server_ext = struct.unpack_from("<I", chunk, ext_at)[0]
                        if self.mask_cache_metadata:
                            # As the relay will: the client never learns the server could
                            # skip result-set metadata, so every result set carries it.
                            self.server_ext &= ~MARIADB_CLIENT_CACHE_METADATA
                            chunk = bytearray(chunk)
                            struct.pack_into("<I", chunk, ext_at, self.server_ext)
                            chunk = bytes(chunk)
                    elif tag == "C" and packets == 0:
                        self.client_caps = struct.unpack_from("<I", chunk, 4)[0]
                        self.client_ext = struct.unpack_from("<I", chunk, 4 + 28)[0]
                    elif tag == "S" and chunk[4] == 0:
                        # The login's OK: record from the next chunk on.
                        self.status = ok_status(chunk[4:])
                        self.logged_in = True
                else:
                    self.lines.append("%s %s" % (tag, chunk.hex()))
                packets += 1
            dst.sendall(chunk)

    def idle(self):
        with self.lock:
            self.lines.append("idle")

    def save(self, name, comment):
        with self.lock:
            head = ["# " + comment, "caps 0x%08x" % (self.client_caps & self.server_caps),
                    "mariadb_caps 0x%08x" % (self.client_ext & self.server_ext),
                    "status 0x%04x" % self.status]
            with open(os.path.join(OUT, name), "w") as f:
                f.write("\n".join(head + self.lines) + "\n")


def lenenc(buf, pos):
    b = buf[pos]
    if b < 0xFB:
        return b, pos + 1
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}[b]
    return int.from_bytes(buf[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def ok_status(p):
    _, pos = lenenc(p, 1)
    _, pos = lenenc(p, pos)
    return struct.unpack_from("<H", p, pos)[0]


def pymysql_session(port, csv_path):
    rec = Recorder(port)
    conn = pymysql.connect(host="127.0.0.1", port=rec.port, user="root", password="",
                           database="cv", local_infile=True,
                           client_flag=CLIENT.MULTI_STATEMENTS)
    cur = conn.cursor()

    def run(sql):
        cur.execute(sql)
        while cur.nextset():
            pass
        rec.idle()

    conn.ping(reconnect=False); rec.idle()
    run("SELECT 1")
    run("CREATE TABLE t (id INT PRIMARY KEY, v MEDIUMTEXT)")
    run("INSERT INTO t VALUES (1, 'a'), (2, REPEAT('b', 20000)), (3, NULL)")
    run("SELECT * FROM t ORDER BY id")
    run("SELECT 1; SELECT id FROM t; DO 1; SELECT 'x', 'y'")
    run("CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2, 3; END")
    run("CALL p()")
    run("LOAD DATA LOCAL INFILE '%s' INTO TABLE t FIELDS TERMINATED BY ','" % csv_path)
    try:
        run("SELECT * FROM no_such_table")
    except pymysql.MySQLError:
        rec.idle()
    run("SELECT SLEEP(0.2)")
    conn.select_db("cv"); rec.idle()
    run("BEGIN")
    run("UPDATE t SET v = 'c' WHERE id = 1")
    run("COMMIT")
    conn.close()
    rec.save("mariadb_pymysql.trace", "PyMySQL %s, MULTI_STATEMENTS, local_infile; mariadbd "
             "10.11" % pymysql.__version__)


def connector_session(port):
    rec = Recorder(port)
    conn = mysql.connector.connect(host="127.0.0.1", port=rec.port, user="root", password="",
                                   database="cv", use_pure=True, ssl_disabled=True)
    cur = conn.cursor(prepared=True)
    cur.execute("SELECT id, v FROM t WHERE id > ? ORDER BY id", (0,))
    cur.fetchall(); rec.idle()
    cur.execute("INSERT INTO t VALUES (?, ?)", (10, "ten"))
    rec.idle()
    conn.commit(); rec.idle()
    plain = conn.cursor()
    plain.execute("SELECT COUNT(*) FROM t")
    plain.fetchall(); rec.idle()
    conn.close()
    rec.save("mariadb_connector_python.trace", "mysql-connector-python %s (pure), prepared "
             "statements; mariadbd 10.11" % mysql.connector.__version__)


def cli_session(port, csv_path):
    """The mariadb CLI (Connector/C): one invocation, several statements, then COM_QUIT. The
    greeting it sees does not offer MARIADB_CLIENT_CACHE_METADATA."""
    rec = Recorder(port, mask_cache_metadata=True)
    sql = ("SELECT 1; SELECT * FROM t ORDER BY id; CALL p(); "
           "LOAD DATA LOCAL INFILE '%s' REPLACE INTO TABLE t FIELDS TERMINATED BY ','; "
           "SELECT @@version" % csv_path)
    subprocess.run(["mariadb", "-h127.0.0.1", "-P%d" % rec.port, "-uroot", "--skip-ssl",
                    "--local-infile=1", "-D", "cv", "-e", sql], check=True, timeout=30,
                   capture_output=True)
    version = subprocess.run(["mariadb", "--version"], capture_output=True, text=True)
    rec.save("mariadb_cli.trace", "%s; mariadbd 10.11, MARIADB_CLIENT_CACHE_METADATA masked "
             "in the greeting" % version.stdout.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    admin = pymysql.connect(host="127.0.0.1", port=args.port, user="root", password="")
    with admin.cursor() as c:
        c.execute("DROP DATABASE IF EXISTS cv")
        c.execute("CREATE DATABASE cv")
    admin.close()
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("4,four\n5,five\n6,six\n")
    pymysql_session(args.port, f.name)
    connector_session(args.port)
    cli_session(args.port, f.name)
    os.unlink(f.name)
    print("wrote", sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()
