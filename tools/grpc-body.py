#!/usr/bin/env python3
"""Writes gRPC-framed request bodies (and RESP input) for the tools that
drive uuidmap and Redis with neutral clients (curl, h2load, redis-cli).

A gRPC message on the wire is a 5-byte prefix (flag 0 = uncompressed, then
the length as a big-endian u32) followed by the protobuf bytes. The
messages here are encoded by hand (fields of type bytes and repeated
messages only), so no protobuf package is needed.

Keys are deterministic: key i is the MD5 of "k<i>", value i the MD5 of
"v<i>" (never the nil or max UUID), so every tool agrees on them.

  grpc-body.py get I OUT [LEVEL]      GetRequest for key I; LEVEL: its consistency
                                      field (1 linearizable, 2 stale; absent: unset)
  grpc-body.py batchget START N OUT   BatchGetRequest for keys START..START+N
  grpc-body.py lookup START N M OUT   M LookupRequests (ids 0..M) for keys
                                      START..START+N each: one Lookup stream's body
  grpc-body.py write START N OUT      WriteRequest putting keys START..START+N
  grpc-body.py resp START N OUT       RESP `SET key value` commands (raw
                                      16-byte keys and values) for redis-cli --pipe
  grpc-body.py keyhex I               prints key I as a UUID (for `uuidmap get`)
  grpc-body.py scan START N OUT       ScanRequest filtered by the values of entries
                                      START..START+N (N = 0: no filter, a full scan)
  grpc-body.py etcdput I OUT          etcd's PutRequest (etcdserverpb.KV/Put)
                                      setting key I to value I, 16 raw bytes each
"""
import hashlib
import struct
import sys
import uuid


def key(i):
    return hashlib.md5(b"k%d" % i).digest()


def value(i):
    return hashlib.md5(b"v%d" % i).digest()


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(number, data):
    # Wire type 2 (length-delimited).
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_varint(number, n):
    # Wire type 0 (varint).
    return varint(number << 3) + varint(n)


def frame(message):
    return struct.pack(">BI", 0, len(message)) + message


def main(argv):
    cmd = argv[1]
    if cmd == "keyhex":
        print(uuid.UUID(bytes=key(int(argv[2]))))
        return
    if cmd == "get":
        level = field_varint(3, int(argv[4])) if len(argv) > 4 else b""
        body = frame(field_bytes(1, key(int(argv[2]))) + level)
        out = argv[3]
    elif cmd == "batchget":
        start, n = int(argv[2]), int(argv[3])
        keys = b"".join(key(i) for i in range(start, start + n))
        body = frame(field_bytes(1, keys))
        out = argv[4]
    elif cmd == "lookup":
        start, n, m = int(argv[2]), int(argv[3]), int(argv[4])
        keys = b"".join(key(i) for i in range(start, start + n))
        body = b"".join(
            frame((field_varint(1, j) if j else b"") + field_bytes(2, keys)) for j in range(m)
        )
        out = argv[5]
    elif cmd == "write":
        start, n = int(argv[2]), int(argv[3])
        ops = bytearray()
        for i in range(start, start + n):
            put = field_bytes(1, key(i)) + field_bytes(2, value(i))
            ops += field_bytes(1, field_bytes(1, put))  # WriteOp{put} in ops
        body = frame(bytes(ops))
        out = argv[4]
    elif cmd == "scan":
        start, n = int(argv[2]), int(argv[3])
        values = b"".join(value(i) for i in range(start, start + n))
        body = frame(field_bytes(4, values) if values else b"")
        out = argv[4]
    elif cmd == "etcdput":
        # PutRequest: field 1 key, field 2 value (both bytes).
        i = int(argv[2])
        body = frame(field_bytes(1, key(i)) + field_bytes(2, value(i)))
        out = argv[3]
    elif cmd == "resp":
        start, n = int(argv[2]), int(argv[3])
        parts = []
        for i in range(start, start + n):
            k, v = key(i), value(i)
            parts.append(b"*3\r\n$3\r\nSET\r\n$16\r\n" + k + b"\r\n$16\r\n" + v + b"\r\n")
        body = b"".join(parts)
        out = argv[4]
    else:
        sys.exit(__doc__)
    with open(out, "wb") as f:
        f.write(body)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv)
