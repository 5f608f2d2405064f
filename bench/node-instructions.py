#!/usr/bin/env python3
"""Instructions a Redis node spends per lock request, counted with callgrind.

Times move by tens of percent on a shared machine; instruction counts do not
(the same run gives the same count whatever else the machine does). So this
runs a scratch redis-server under `valgrind --tool=callgrind` per workload,
sends it a fixed sequence of requests, and prints the instructions the server
spent parsing and running them (the inclusive cost of `processInputBuffer`:
the kernel's share, the reply writes and the server's timers are not in it)
per request. Workloads:

- the library's batch of 14 releases and 14 acquires (one call of its
  release script, then a top-level `SET NX PX` per acquire, in one
  pipeline), per acquire + release pair; the raw cycle (`SET NX PX` and a
  one-key owner-checked release script per pair);
- a one-key cycle (`SET NX PX`, then the library's release script, with no
  waiter queued) against the same with the raw release script;
- the fenced acquisition, its token taken with the grant (the acquire
  script alone) and with the proposal round (the acquire script, then the
  proposal), against a plain `SET NX PX`.

The scripts are the library's own, written out by an ignored unit test:

    mkdir -p /tmp/scripts
    QUORUMLOCK_SCRIPTS_DIR=/tmp/scripts cargo test -p quorumlock --lib write_scripts -- --ignored
    python3 bench/node-instructions.py /tmp/scripts

Needs redis-server, redis-cli, valgrind and callgrind_annotate (Debian's
redis-server and valgrind packages). Used for docs/benchmarks.md.
"""
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else None
BATCHES = 300
PER_BATCH = 14
CALLS = 2000
TTL_MS = 30000
NOW_MS = 1700000000000
RAW_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"
)


def encode(*args):
    out = b"*%d\r\n" % len(args)
    for arg in args:
        arg = arg if isinstance(arg, bytes) else str(arg).encode()
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


class Node:
    """A connection to the scratch server."""

    def __init__(self, port):
        deadline = time.monotonic() + 60
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.reader = self.sock.makefile("rb")

    def read(self):
        line = self.reader.readline()
        kind = line[:1]
        if kind == b"*":
            count = int(line[1:])
            return None if count < 0 else [self.read() for _ in range(count)]
        if kind == b"$":
            size = int(line[1:])
            return None if size < 0 else self.reader.read(size + 2)[:-2]
        if kind == b"-":
            raise RuntimeError(line.decode().strip())
        return line[1:].strip()

    def pipeline(self, commands):
        self.sock.sendall(b"".join(encode(*c) for c in commands))
        return [self.read() for _ in commands]

    def command(self, *args):
        return self.pipeline([args])[0]

    def load(self, source):
        return self.command("SCRIPT", "LOAD", source).decode()


def token():
    return "%032x" % random.getrandbits(128)


def key(i):
    return "order:%08d" % i


def queue(k):
    return "quorumlock:waiters:{%s}" % k


def batches(node, send):
    """Runs BATCHES batches of PER_BATCH releases (of the previous batch's
    keys) and PER_BATCH acquires through `send(releases, acquires)`;
    returns the acquire + release pairs."""
    held, n = [], 0
    for _ in range(BATCHES + 1):
        releases, held = held, []
        acquires = [(key(n + i), token()) for i in range(PER_BATCH)]
        n += PER_BATCH
        send(releases, acquires)
        held = acquires
    return BATCHES * PER_BATCH


def batch_pipeline(node):
    """The library's batch: one call of its release script for the batch's
    releases, then a top-level SET NX PX per acquire, in one pipeline."""
    sha = node.load(read_script("batch"))

    def send(releases, acquires):
        keys = [k for k, _ in releases] + [queue(k) for k, _ in releases]
        script = [("EVALSHA", sha, len(keys), *keys, NOW_MS, *[t for _, t in releases])] if releases else []
        node.pipeline(script + [("SET", k, t, "NX", "PX", TTL_MS) for k, t in acquires])

    return batches(node, send)


def raw_pairs(node):
    sha = node.load(RAW_RELEASE)

    def send(releases, acquires):
        node.pipeline(
            [("EVALSHA", sha, 1, k, t) for k, t in releases]
            + [("SET", k, t, "NX", "PX", TTL_MS) for k, t in acquires]
        )

    return batches(node, send)


def one_key_releases(node, source, with_queue):
    sha = node.load(source)
    for i in range(CALLS):
        k, t = key(i), token()
        node.command("SET", k, t, "NX", "PX", TTL_MS)
        if with_queue:
            node.command("EVALSHA", sha, 2, k, queue(k), t, NOW_MS)
        else:
            node.command("EVALSHA", sha, 1, k, t)
    return CALLS


def fenced_acquisitions(node, take):
    """Fenced acquires of fresh resources. With `take`, each proposes the
    node's clock from the previous reply (the first, from a `TIME`) half a
    second ahead and allows a second (the library allows 10 ms, but a call
    under callgrind takes milliseconds; the values cost the node nothing),
    which the node takes with its grant: the library's usual acquisition. Without, each proposes
    nothing and the proposal round follows, as where a proposal is refused.
    Fails unless every acquisition went the way it measures."""
    acquire, propose = node.load(read_script("fenced_acquire")), node.load(read_script("propose"))
    seconds, micros = node.command("TIME")
    node_us = int(seconds) * 1000000 + int(micros)
    for i in range(CALLS):
        k, t = key(i), token()
        fence = "quorumlock:fence:{%s}" % k
        proposal = node_us + 500000 if take else 0
        granted, floor, taken, node_us = node.command(
            "EVALSHA", acquire, 2, k, fence, t, TTL_MS, proposal, 86400000, 1000000)
        if int(taken) != int(take):
            raise RuntimeError("fenced acquire %d: taken=%s, wanted %s (proposal %d, floor %s, node clock %s)" % (i, taken, take, proposal, floor, node_us))
        node_us = int(node_us)
        if not take:
            accepted, _ = node.command("EVALSHA", propose, 2, k, fence, int(floor) + 1, 86400000, t)
            if int(accepted) != 1:
                raise RuntimeError("proposal %d refused" % i)
    return CALLS


def plain_sets(node):
    for i in range(CALLS):
        node.command("SET", key(i), token(), "NX", "PX", TTL_MS)
    return CALLS


def read_script(name):
    with open(os.path.join(SCRIPTS, name + ".lua")) as f:
        return f.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def instructions(workload):
    """Runs `workload` against a scratch server under callgrind; returns the
    server's instructions per unit the workload reports."""
    random.seed(1)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
             "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            node = Node(port)
            units = workload(node)
            try:
                node.sock.sendall(encode("SHUTDOWN", "NOSAVE"))
            except OSError:
                pass
            server.wait(timeout=120)
        finally:
            if server.poll() is None:
                server.kill()
        report = subprocess.run(["callgrind_annotate", "--inclusive=yes", out],
                                capture_output=True, text=True, check=True).stdout
    for line in report.splitlines():
        if line.rstrip().endswith("]") and ":processInputBuffer [" in line:
            return int(line.split()[0].replace(",", "")) / units
    raise RuntimeError("no processInputBuffer in the profile")


def main():
    if not SCRIPTS:
        sys.exit(__doc__)
    rows = [
        ("batch pipeline, per acquire + release", batch_pipeline),
        ("raw: SET NX PX + release script, per pair", raw_pairs),
        ("SET NX PX + release script (no waiter)", lambda n: one_key_releases(n, read_script("release"), True)),
        ("SET NX PX + raw release script", lambda n: one_key_releases(n, RAW_RELEASE, False)),
        ("fenced acquire taking the token, per acquisition", lambda n: fenced_acquisitions(n, True)),
        ("fenced acquire + proposal round, per acquisition", lambda n: fenced_acquisitions(n, False)),
        ("SET NX PX, per call", plain_sets),
    ]
    for label, workload in rows:
        print("%-48s %8.0f instructions" % (label, instructions(workload)))


if __name__ == "__main__":
    main()
