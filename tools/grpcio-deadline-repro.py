#!/usr/bin/python3
"""Issue 34 item 7: Scans with a 1 ms deadline from grpcio (C-core), the
client that reported "Exception deserializing response!" on a gzip body.

  grpcio-deadline-repro.py ADDR [ROUNDS] [SCANS] [TIMEOUT_MS] [identity]

Loads 2,000 entries into the server at ADDR (host:port, plaintext), then
ROUNDS times (default 1): 20 each of Get, Ping and Put with a 1 ms deadline,
then SCANS (default 200) Scans with a 1 ms deadline (TIMEOUT_MS: another),
all on one channel. grpcio advertises `grpc-accept-encoding: identity,
deflate, gzip`, so the server answers with gzip (`identity`: the channel
enables no compression, `grpc.compression_enabled_algorithms_bitset` 1, so
it advertises identity alone and gets plain answers). Every call should end
OK or DEADLINE_EXCEEDED; an INTERNAL "Exception deserializing response!"
means a message reached protobuf still compressed. Prints the counts per
outcome, and each such call's number and HTTP/2 stream id (2n - 1: the
loading Writes count), and exits 1 if any INTERNAL was seen.

What it found (2 cores, loopback): grpcio 1.85.3 (C-core 58, from pip) gets
it for 0.01-0.1 % of Scans (by load; the report saw about 1 %), grpcio
1.51.1 (Debian's python3-grpcio) never in over 30,000. The server is not
the cause: on the wire every such answer had `grpc-encoding: gzip` in its
headers before a message with the compressed flag, and grpcio 1.85.3 does
the same against tools/grpc-gzip-fake-server.py, which sends nothing else.
`identity` avoids it. tests/server/compressed_flag.rs keeps the server's
side.

Runs with Debian's python3-grpcio and python3-protobuf (/usr/bin/python3) or
a pip-installed grpcio. The messages are encoded by hand; responses are
decoded with protobuf message classes built from descriptors here, so a bad
body raises as a generated class would.
"""
import collections
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def _messages():
    fd = descriptor_pb2.FileDescriptorProto(
        name="repro/uuidmap.proto", package="uuidmap.v1", syntax="proto3"
    )

    def msg(name, fields):
        m = fd.message_type.add(name=name)
        for number, (fname, ftype) in enumerate(fields, start=1):
            m.field.add(name=fname, number=number, type=ftype, label=F.LABEL_OPTIONAL)

    msg("ScanResponse", [("entries", F.TYPE_BYTES), ("cursor", F.TYPE_BYTES),
                         ("applied_lsn", F.TYPE_UINT64)])
    msg("GetResponse", [("value", F.TYPE_BYTES)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        make = message_factory.GetMessageClass
    else:
        make = message_factory.MessageFactory(pool).GetPrototype
    get = lambda n: make(pool.FindMessageTypeByName("uuidmap.v1." + n))
    return get("ScanResponse"), get("GetResponse")


ScanResponse, GetResponse = _messages()


import grpc_body as _body  # tools/grpc_body.py: grpc-body.py's helpers
varint = _body.varint
field_bytes = _body.field_bytes
key = _body.key
value = _body.value


def write_request(start, n):
    ops = b""
    for i in range(start, start + n):
        put = field_bytes(1, key(i)) + field_bytes(2, value(i))
        ops += field_bytes(1, field_bytes(1, put))
    return ops


def main():
    addr = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    scans = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    timeout = float(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0.001
    identity = len(sys.argv) > 5 and sys.argv[5] == "identity"
    ident = lambda b: b
    options = [("grpc.compression_enabled_algorithms_bitset", 1)] if identity else []
    channel = grpc.insecure_channel(addr, options=options)
    write = channel.unary_unary("/uuidmap.v1.UuidMap/Write", ident, ident)
    get = channel.unary_unary("/uuidmap.v1.UuidMap/Get", ident, GetResponse.FromString)
    ping = channel.unary_unary("/uuidmap.v1.UuidMap/Ping", ident, ident)
    put = channel.unary_unary("/uuidmap.v1.UuidMap/Put", ident, ident)
    scan = channel.unary_stream("/uuidmap.v1.UuidMap/Scan", ident, ScanResponse.FromString)
    for start in range(0, 2000, 500):
        write(write_request(start, 500), timeout=30)

    outcomes = collections.Counter()
    bad = []

    calls = [4]  # the loading Writes

    def call(kind, fn):
        calls[0] += 1
        try:
            fn()
            outcomes[(kind, "OK")] += 1
        except grpc.RpcError as e:
            outcomes[(kind, e.code().name)] += 1
            if e.code() == grpc.StatusCode.INTERNAL:
                bad.append((kind, f"call {calls[0]} (stream {2 * calls[0] - 1}): {e.details()}"))

    for _ in range(rounds):
        for i in range(20):
            call("Get", lambda: get(field_bytes(1, key(i)), timeout=timeout))
            call("Ping", lambda: ping(b"", timeout=timeout))
            call("Put", lambda: put(field_bytes(1, key(i)) + field_bytes(2, value(i)),
                                    timeout=timeout))
        for _ in range(scans):
            call("Scan", lambda: list(scan(b"", timeout=timeout)))
    for (kind, code), n in sorted(outcomes.items()):
        print(f"{kind:5} {code:20} {n}")
    scans_total = sum(n for (k, _), n in outcomes.items() if k == "Scan")
    internal = sum(1 for k, _ in bad if k == "Scan")
    print(f"Scan INTERNAL: {internal} of {scans_total}")
    for kind, details in bad[:5]:
        print(f"  {kind}: {details}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
