#!/usr/bin/python3
"""A stand-in gRPC server that cannot get compression wrong, to tell a client
bug from a server bug (issue 34 item 7, with tools/grpcio-deadline-repro.py).

  grpc-gzip-fake-server.py PORT [MAX_DELAY_MS]

Listens on 127.0.0.1:PORT (plaintext HTTP/2, python-h2). A Scan is answered
with headers carrying `grpc-encoding: gzip` at once, then, after a random
0.3..1 x MAX_DELAY_MS (default 2.5), one message with the compressed flag
(gzip of a ScanResponse of 2,000 entries), then OK trailers. Any other call
gets an empty message, uncompressed, with no grpc-encoding. So every
compressed message follows headers that announce it, on every call.

Against it, grpcio 1.85.3 still reports "Exception deserializing response!"
for a few Scans in a thousand whose message arrives around a 2 ms deadline
(`grpcio-deadline-repro.py 127.0.0.1:PORT 5 200 2`); grpcio 1.51.1 never
does. Needs Debian's python3-h2.
"""
import gzip
import hashlib
import random
import socket
import sys
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions


import grpc_body as _body  # tools/grpc_body.py: grpc-body.py's helpers
varint = _body.varint


ENTRIES = b"".join(
    hashlib.md5(b"k%d" % i).digest() + hashlib.md5(b"v%d" % i).digest() for i in range(2000)
)
SCAN = gzip.compress(b"\x0a" + varint(len(ENTRIES)) + ENTRIES)
SCAN_FRAME = b"\x01" + len(SCAN).to_bytes(4, "big") + SCAN
SCAN_HEADERS = [(":status", "200"), ("content-type", "application/grpc"),
                ("grpc-encoding", "gzip"), ("grpc-accept-encoding", "gzip")]
PLAIN_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]


def serve(sock, max_delay):
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    conn.initiate_connection()
    conn.increment_flow_control_window(1 << 24)
    sock.sendall(conn.data_to_send())
    lock = threading.Lock()
    paths = {}

    def step(action):
        with lock:
            try:
                action()
            except h2.exceptions.ProtocolError:
                # The client reset the stream (its deadline): h2 no longer
                # knows it, and says so in one of several ways.
                return False
            sock.sendall(conn.data_to_send())
        return True

    def body(sid, data):
        for i in range(0, len(data), conn.max_outbound_frame_size):
            conn.send_data(sid, data[i:i + conn.max_outbound_frame_size])

    def answer(sid, scan):
        headers, data = (SCAN_HEADERS, SCAN_FRAME) if scan else (PLAIN_HEADERS, b"\0" * 5)
        if not step(lambda: conn.send_headers(sid, headers)):
            return
        if scan:
            time.sleep(random.uniform(0.3 * max_delay, max_delay))
        if step(lambda: body(sid, data)):
            step(lambda: conn.send_headers(sid, [("grpc-status", "0")], end_stream=True))

    while True:
        data = sock.recv(1 << 20)
        if not data:
            return
        with lock:
            events = conn.receive_data(data)
            out = conn.data_to_send()
        if out:
            sock.sendall(out)
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                paths[ev.stream_id] = dict(ev.headers)[":path"]
            elif isinstance(ev, h2.events.DataReceived):
                with lock:
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                scan = paths.pop(ev.stream_id).endswith("/Scan")
                threading.Thread(target=answer, args=(ev.stream_id, scan), daemon=True).start()
        with lock:
            out = conn.data_to_send()
        if out:
            sock.sendall(out)


def main():
    port = int(sys.argv[1])
    max_delay = (float(sys.argv[2]) if len(sys.argv) > 2 else 2.5) / 1000
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    while True:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(sock, max_delay), daemon=True).start()


if __name__ == "__main__":
    main()
