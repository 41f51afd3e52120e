#!/usr/bin/env python3
"""Sends the same commands, as raw RESP2, to redis-server and to uuidmap's
Redis-protocol port, and compares the answers byte for byte.

    tools/resp-conformance.py REDIS_PORT UUIDMAP_PORT

Run by tools/resp-conformance.sh, which starts both servers. Each step is
one command (or one pipelined batch); a step marked as a known difference
is sent to both and printed with both answers, and only checked against
uuidmap's documented answer (README, "The Redis protocol", "What differs
from Redis"). Exits 1, naming the step, on any other difference.
"""

import socket
import sys


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def reply(self):
        """One whole reply, as its raw bytes."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        raw = line + b"\r\n"
        if kind == b"$" and int(rest) >= 0:
            raw += self._exact(int(rest) + 2)
        elif kind in (b"*", b"%") and int(rest) >= 0:
            for _ in range(int(rest) * (2 if kind == b"%" else 1)):
                raw += self.reply()
        return raw

    def call(self, *args):
        self.sock.sendall(encode(*args))
        return self.reply()

    def pipeline(self, commands):
        self.sock.sendall(b"".join(encode(*c) for c in commands))
        return b"".join(self.reply() for _ in commands)


K1 = "67e55044-10b1-426f-9247-bb680e5fe0c8"
K2 = "67e55044-10b1-426f-9247-bb680e5fe0c9"
MISSING = "67e55044-10b1-426f-9247-bb680e5fe0ca"
V1 = "5ba4d000-0000-4000-8000-00000000000a"
V2 = "5ba4d000-0000-4000-8000-00000000000b"

# (name, commands, uuidmap's answer when it differs from Redis on purpose)
STEPS = [
    ("PING", [["PING"]], None),
    ("PING message", [["PING", "hello"]], None),
    ("ECHO", [["ECHO", "a marker"]], None),
    ("ping in lower case", [["ping"]], None),
    ("SET", [["SET", K1, V1]], None),
    ("GET", [["GET", K1]], None),
    ("GET a missing key", [["GET", MISSING]], None),
    ("MGET", [["MGET", K1, MISSING, K1]], None),
    ("EXISTS counts a key named twice twice", [["EXISTS", K1, K1, MISSING]], None),
    ("SET NX on a present key", [["SET", K1, V2, "NX"]], None),
    ("SET NX on an absent key", [["SET", K2, V2, "NX"]], None),
    ("SET XX on a present key", [["SET", K2, V1, "XX"]], None),
    ("SET XX on an absent key", [["SET", MISSING, V1, "XX"]], None),
    ("SET NX XX", [["SET", K1, V1, "NX", "XX"]], None),
    ("SET with an unknown option", [["SET", K1, V1, "BOGUS"]], None),
    ("DBSIZE", [["DBSIZE"]], None),
    ("DEL counts a key named twice once", [["DEL", K2, MISSING, K2]], None),
    ("DEL again", [["DEL", K2]], None),
    ("MSET", [["MSET", K1, V2, K2, V1]], None),
    ("MGET after MSET", [["MGET", K2, K1]], None),
    ("MSET with an odd count", [["MSET", K1, V1, K2]], None),
    ("GET with no key", [["GET"]], None),
    ("GET with two keys", [["GET", K1, K2]], None),
    ("SET with one argument", [["SET", K1]], None),
    ("an unknown command", [["NOSUCHCMD"]], None),
    ("an unknown command with arguments", [["NOSUCHCMD", "a", "b"]], None),
    ("SELECT 0", [["SELECT", "0"]], None),
    ("CLIENT SETNAME", [["CLIENT", "SETNAME", "conformance"]], None),
    ("CLIENT GETNAME", [["CLIENT", "GETNAME"]], None),
    (
        "a pipeline answers in order",
        [["SET", K1, V1], ["GET", K1], ["DEL", K1], ["GET", K1], ["EXISTS", K1]],
        None,
    ),
    ("SCAN to the end with MATCH *", [["SCAN", "0", "MATCH", "*", "COUNT", "1000"]], "scan"),
    # Documented differences (README, "What differs from Redis").
    (
        "SET EX (no expiry in uuidmap)",
        [["SET", K1, V1, "EX", "10"]],
        b"-ERR uuidmap keeps no expiry and SET answers no old value: EX, PX, EXAT, PXAT, "
        b"KEEPTTL and GET are not supported\r\n",
    ),
    (
        "a key that is not a UUID",
        [["SET", "user:1000", V1]],
        "prefix:-ERR the key is not a UUID",
    ),
    ("SELECT 1 (one database)", [["SELECT", "1"]], "prefix:-ERR"),
    ("QUIT", [["QUIT"]], None),
    # On new connections: both speak RESP3 after this.
    ("HELLO 3: a map with proto 3", [["HELLO", "3"]], "prefix:%7\r\n"),
    ("RESP3 null", [["GET", MISSING]], None),
    ("RESP3 MGET with a null", [["MGET", K2, MISSING]], None),
    ("HELLO 4", [["HELLO", "4"]], None),
]


def main():
    redis_port, uuidmap_port = int(sys.argv[1]), int(sys.argv[2])
    redis, ours = Conn(redis_port), Conn(uuidmap_port)
    failed = 0
    same = 0
    for name, commands, expected in STEPS:
        if name.startswith("HELLO 3"):
            redis, ours = Conn(redis_port), Conn(uuidmap_port)
        theirs = redis.pipeline(commands)
        mine = ours.pipeline(commands)
        if expected is None:
            ok = theirs == mine
            if ok:
                same += 1
        elif expected == "scan":
            ok = scan_keys(theirs) == scan_keys(mine) and mine.startswith(b"*2\r\n$1\r\n0\r\n")
        elif isinstance(expected, str) and expected.startswith("prefix:"):
            ok = mine.startswith(expected[len("prefix:"):].encode())
        else:
            ok = mine == expected
        mark = "ok  " if ok else "FAIL"
        print(f"{mark}  {name}")
        if not ok or expected is not None:
            print(f"        redis:   {theirs!r}\n        uuidmap: {mine!r}")
        failed += not ok
    print(f"{same} steps answered byte for byte as Redis; {failed} failed")
    failed += redis_py(uuidmap_port)
    sys.exit(1 if failed else 0)


def redis_py(port):
    """A session of redis-py (Debian's python3-redis), the client most
    Python users have: its own parsing, pipelines and scan_iter."""
    try:
        import redis
    except ImportError:
        print("redis-py is not installed (python3-redis): its session is skipped")
        return 0
    r = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    keys = [f"20000000-0000-4000-8000-{i:012d}" for i in range(1, 501)]
    checks = []
    before = set(r.scan_iter())  # what the raw steps left
    checks.append(("redis-py ping", r.ping() is True))
    checks.append(("redis-py set/get", r.set(K1, V1) is True and r.get(K1) == V1))
    checks.append(("redis-py set nx", r.set(K1, V2, nx=True) is None))
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.set(k, V1)
    checks.append(("redis-py pipeline of 500 sets", all(x is True for x in pipe.execute())))
    checks.append(("redis-py mget", r.mget(keys[:3] + [MISSING]) == [V1, V1, V1, None]))
    seen = list(r.scan_iter(count=37))
    checks.append(("redis-py scan_iter: every key once", sorted(seen) == sorted(before | set(keys) | {K1})))
    moved = r.execute_command("SET", K1, V2, "IFEQ", V1)
    stale = r.execute_command("SET", K1, V1, "IFEQ", V1)
    # redis-py turns SET's +OK into True.
    checks.append(("redis-py SET IFEQ", moved is True and stale is None and r.get(K1) == V2))
    checks.append(("redis-py DELIFEQ", r.execute_command("DELIFEQ", K1, V2) == 1))
    checks.append(("redis-py delete", r.delete(*keys) == len(keys) and r.dbsize() == len(before - {K1})))
    try:
        r.get("user:1000")
        checks.append(("redis-py gets an error for a key that is not a UUID", False))
    except redis.ResponseError as e:
        checks.append(
            ("redis-py gets an error for a key that is not a UUID", "not a UUID" in str(e))
        )
    failed = 0
    for name, ok in checks:
        print(f"{'ok  ' if ok else 'FAIL'}  {name}")
        failed += not ok
    return failed


def scan_keys(raw):
    """The keys of one whole SCAN answer (cursor 0 asked with a COUNT that
    covers every key), sorted."""
    parts = raw.split(b"\r\n")
    keys = [parts[i + 1] for i, p in enumerate(parts) if p.startswith(b"$") and i > 2]
    return sorted(keys)


if __name__ == "__main__":
    main()
