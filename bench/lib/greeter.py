#!/usr/bin/env python3
"""A trivial "compute" for the memory benchmark: greets every connection like MySQL
(a HandshakeV10 packet) and then holds it open, reading and discarding whatever arrives.

Usage: greeter.py PORT
"""

import asyncio
import resource
import struct
import sys

GREETING = (b"\x0a" + b"5.5.5-10.11.0-greeter\0" + struct.pack("<I", 1) + b"abcdefgh\0"
            + struct.pack("<H", 0xF7FF) + b"\x2d" + struct.pack("<H", 2)
            + struct.pack("<H", 0x81BF) + b"\x15" + b"\0" * 10 + b"ijklmnopqrst\0"
            + b"mysql_native_password\0")
PACKET = struct.pack("<I", len(GREETING))[:3] + b"\0" + GREETING


async def serve(reader, writer):
    writer.write(PACKET)
    try:
        while await reader.read(65536):
            pass
    except OSError:
        pass
    writer.close()


async def main(port):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
