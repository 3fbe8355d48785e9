#!/usr/bin/env python3
"""A loopback TCP proxy that acknowledges at once: usage quickack_proxy.py LISTEN_PORT TARGET_PORT.

s3s-fs (the S3-compatible server the benches and tests use) does not set TCP_NODELAY, so a
small answer's body waits for the ACK of its headers, which the client delays by up to 40 ms:
every ranged GET then costs ~43 ms on loopback, which real S3 endpoints do not add. This proxy
sets TCP_QUICKACK before every read from the server (and TCP_NODELAY on both legs), so the
body goes at once; what remains is s3s-fs's own time and one more loopback hop.
"""

import socket
import sys
import threading
import time


def pump(src, dst, quickack, delay=0.0):
    """Copies src to dst until either ends; `delay` seconds before each chunk (a distant peer,
    bench/idle-boundary.py)."""
    try:
        while True:
            if quickack:
                src.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            data = src.recv(1 << 20)
            if not data:
                break
            if delay:
                time.sleep(delay)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    listen, target = int(sys.argv[1]), int(sys.argv[2])
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen))
    server.listen(64)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection(("127.0.0.1", target))
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(client, upstream, False), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, True), daemon=True).start()


if __name__ == "__main__":
    main()
