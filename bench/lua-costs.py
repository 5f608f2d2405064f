#!/usr/bin/env python3
"""Server-side cost of work inside a Lua script, from INFO commandstats.

Starts nothing: point it at a scratch redis-server (it runs FLUSHALL and
CONFIG RESETSTAT), e.g.

    redis-server --port 17777 --save '' --appendonly no --daemonize yes
    python3 bench/lua-costs.py 17777
    redis-cli -p 17777 shutdown nosave

Each line is the server's own time per EVALSHA (usec_per_call), which the
speed of this client does not affect, and the time of the commands the
script ran. Used for docs/how-it-works.md, "Batching of acquires and releases".
"""
import socket
import sys

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
REPS = 3000
N = 30
TOKEN = "x" * 22

sock = socket.create_connection(("127.0.0.1", PORT))
reader = sock.makefile("rb")


def encode(*args):
    out = b"*%d\r\n" % len(args)
    for arg in args:
        arg = str(arg).encode()
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


def read():
    line = reader.readline()
    kind = line[:1]
    if kind == b"*":
        return [read() for _ in range(int(line[1:]))]
    if kind == b"$":
        size = int(line[1:])
        return None if size < 0 else reader.read(size + 2)[:-2]
    if kind == b"-":
        raise RuntimeError(line.decode().strip())
    return line.strip()


def command(*args):
    sock.sendall(encode(*args))
    return read()


def stats():
    text = command("INFO", "commandstats").decode()
    out = {}
    for line in text.split("\r\n"):
        if line.startswith("cmdstat_"):
            name, fields = line[len("cmdstat_"):].split(":", 1)
            values = dict(field.split("=") for field in fields.split(","))
            out[name] = float(values["usec_per_call"])
    return out


def cost(label, source, keys, args):
    sha = command("SCRIPT", "LOAD", source).decode()
    command("FLUSHALL")
    command("CONFIG", "RESETSTAT")
    for rep in range(REPS):
        names = ["k%d:%d" % (rep, i) for i in range(keys)]
        command("EVALSHA", sha, keys, *names, *([TOKEN] * args))
    per_call = stats()
    inner = ", ".join(
        "%s %.2f" % (name, usec)
        for name, usec in per_call.items()
        if name not in ("evalsha", "config|resetstat", "flushall", "script|load")
    )
    print("%-38s %6.1f us per call   %s" % (label, per_call["evalsha"], inner))


cost("return 0, no arguments", "return 0", 0, 0)
cost("return 0, %d keys + %d args" % (N, 2 * N), "return 0", N, 2 * N)
cost("%d x GET (absent keys)" % N, "for i = 1, #KEYS do redis.call('GET', KEYS[i]) end return 0", N, 2 * N)
cost("1 x MGET of %d" % N, "redis.call('MGET', unpack(KEYS)) return 0", N, 2 * N)
cost(
    "%d x SET NX PX, then 1 DEL of all" % N,
    "for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[i], 'NX', 'PX', '10000') end "
    "redis.call('DEL', unpack(KEYS)) return 0",
    N,
    2 * N,
)
