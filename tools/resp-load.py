"""Loads a Redis-protocol server with `count` keys (tools/bench-resp.sh,
tools/bench-resp-steps.sh): MSET batches of 1000 pairs over one socket.

    python3 tools/resp-load.py PORT COUNT VALUE [spread]

Keys are UUID texts `PPPPPPPP-0000-4000-8000-<12 digits of the number>`:
with `spread`, PPPPPPPP is a multiplicative hash of the number (as random
UUIDs' first bytes are spread); without it, `10000000` (the template the
GET rows of redis-benchmark use, `10000000-0000-4000-8000-__rand_int__`).
"""
import socket
import sys

port, n, value = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
spread = len(sys.argv) > 4 and sys.argv[4] == "spread"
s = socket.create_connection(("127.0.0.1", port))


def bulk(b):
    return b"$%d\r\n%s\r\n" % (len(b), b)


def key(i):
    prefix = (i * 2654435761) & 0xFFFFFFFF if spread else 0x10000000
    return b"%08x-0000-4000-8000-%012d" % (prefix, i)


sent = 0
for start in range(0, n, 1000):
    keys = range(start, min(n, start + 1000))
    cmd = b"*%d\r\n" % (1 + 2 * len(keys)) + bulk(b"MSET")
    for i in keys:
        cmd += bulk(key(i)) + bulk(value)
    s.sendall(cmd)
    sent += 1
got = b""
while got.count(b"\r\n") < sent:
    chunk = s.recv(65536)
    if not chunk:
        sys.exit("closed while loading")
    got += chunk
if got.count(b"+OK\r\n") != sent:
    sys.exit("a load MSET failed: %r" % got[:200])
