# Sequential new TCP connections with a 1 KiB echo round trip each, as a
# native client makes them: directly, or through an HTTP CONNECT proxy.
# Used by BenchmarkSandboxConnectRate; prints "<count> <seconds>" and the
# median microseconds of each phase: connect, CONNECT answered (0 when
# direct), echo round trip, close; then the median CONNECT answer of the
# first 100 connections alone (how long a proxy takes to reach its
# steady pace after the client process starts).
#   python3 connrate.py direct|connect PROXY TARGET COUNT MAX_SECONDS
import socket
import sys
import time

mode, proxy, target, count, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
host, port = target.rsplit(":", 1)
payload = b"x" * 1024


phases = ([], [], [], [])


def once():
    t0 = time.monotonic()
    t1 = t0
    if mode == "direct":
        s = socket.create_connection((host, int(port)), timeout=5)
        t1 = time.monotonic()
    else:
        ph, pp = proxy.rsplit(":", 1)
        s = socket.create_connection((ph, int(pp)), timeout=5)
        t1 = time.monotonic()
        s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode()))
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(4096)
            if not d:
                sys.exit("proxy closed the connection: %r" % buf[:200])
            buf += d
        if not (buf.startswith(b"HTTP/1.1 200") or buf.startswith(b"HTTP/1.0 200")):
            sys.exit("CONNECT refused: %r" % buf[:300])
    t2 = time.monotonic()
    s.sendall(payload)
    got = 0
    while got < len(payload):
        d = s.recv(65536)
        if not d:
            sys.exit("echo server closed after %d bytes" % got)
        got += len(d)
    t3 = time.monotonic()
    s.close()
    t4 = time.monotonic()
    for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
        phases[i].append(d)


start = time.monotonic()
n = 0
while n < count and time.monotonic() - start < limit:
    once()
    n += 1
elapsed = time.monotonic() - start


def median_us(v):
    return int(sorted(v)[len(v) // 2] * 1e6) if v else 0


print(n, elapsed, *(median_us(p) for p in phases), median_us(phases[1][:100]))
