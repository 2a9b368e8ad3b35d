"""Misbehaving trainers for the co-location tests (standard library only).

    python fake_trainer.py SOCKET MODE [--pid PID]

MODE: never-ack (hello, then reads directives and never acks), garbage (hello, then
floods junk lines), well-behaved (acks everything, reports every heartbeat). --pid makes the
hello claim another process's pid. Prints one JSON line per directive received.
"""

import argparse
import json
import os
import socket
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("socket")
p.add_argument("mode", choices=["never-ack", "garbage", "well-behaved"])
p.add_argument("--pid", type=int, default=os.getpid())
args = p.parse_args()

s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(args.socket)
s.sendall((json.dumps({"type": "hello", "version": 1, "name": "fake-" + args.mode,
                       "pid": args.pid, "device": "cpu", "max_streams": 2,
                       "memory_bytes": 1 << 20}) + "\n").encode())
pending = b""
while b"\n" not in pending:
    chunk = s.recv(65536)
    if not chunk:
        sys.exit("closed before the welcome")
    pending += chunk
line, pending = pending.split(b"\n", 1)
print(json.dumps(json.loads(line)), flush=True)

if args.mode == "garbage":
    try:
        for i in range(100000):
            s.sendall(b"this is not json %d\n" % i)
    except OSError:
        print("disconnected", flush=True)
    sys.exit(0)

# Read with select() so the loop can report between directives (a timed-out file object
# would be unusable afterwards).
import select

last_report = 0.0
while True:
    ready, _, _ = select.select([s], [], [], 0.2)
    if ready or b"\n" in pending:
        chunk = s.recv(65536) if ready else b"-"
        if not chunk:
            print("disconnected", flush=True)
            break
        if ready:
            pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            d = json.loads(line)
            print(json.dumps(d), flush=True)
            if args.mode == "well-behaved" and d.get("type") == "directive":
                s.sendall((json.dumps({"type": "ack", "seq": d["seq"], "streams": 1,
                                       "memory_bytes": 0}) + "\n").encode())
    if time.monotonic() - last_report > 0.2:
        last_report = time.monotonic()
        try:
            s.sendall(b'{"type":"report","step":1,"samples_per_second":1.0,"loss":1.0}\n')
        except OSError:
            print("disconnected", flush=True)
            break
