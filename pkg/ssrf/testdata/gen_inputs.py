#!/usr/bin/env python3
"""Inputs for glibc_inet_aton.c: hand-picked edge cases, then a fixed-seed
random mix of 1-4 parts in decimal, octal and hex with boundary values."""
import random

cases = """127.0.0.1
127.1
127.0.1
2130706433
0177.0.0.1
0x7f.0.0.1
0x7F.1
0X7f.1
0x7f000001
017700000001
0x
0x.0
0
00
08
09
0x100000000
4294967295
4294967296
127.0.0.1.
127.0.0.1 x
127.0.0.1 
 127.0.0.1
+1
-1
1..1
.1
1.
256.1
1.256
1.65536
1.16777215
1.16777216
1.2.65535
1.2.65536
1.2.3.256
1.2.3.4.5
0x0x1
1e1
0x1g
0000000000000000000000177.1
0x00000000000000000000007f.1
localhost
169.254.169.254
0251.0376.0251.0376
0xa9.0xfe.0xa9.0xfe
2852039166
0xa9fea9fe
100.100.100.200
0x64646464
1684300900
10.1
0xa.1
012.1
192.168.1
3232235777
0.0.0.0
0.0
00000
0x0
255.255.255.255
0xff.0xff.0xff.0xff
0377.0377.0377.0377
037777777777
0xffffffff
0x0000000000ffffffff
1.2.3.0x4
1.2.3.04
1.2.3.4 
::1
[::1]
1.2.3.4x
x1.2.3.4
0x-1
0x+1
1,2,3,4
1.2.3.4/24
0o17""".split("\n")

def part(r):
    k = r.random()
    v = r.choice([0, 1, 7, 8, 9, 10, 127, 255, 256, 65535, 65536, 16777215, 16777216, 4294967295, 4294967296, r.randrange(0, 1 << 33)])
    if k < 0.4:
        return str(v)
    if k < 0.7:
        return "0" + format(v, "o") if r.random() < 0.9 else "0" + format(v, "o") + r.choice("89")
    if k < 0.95:
        return r.choice(["0x", "0X"]) + (format(v, "x") if r.random() < 0.5 else format(v, "X"))
    return r.choice(["", "0x", "x1", "1a", "00", "0x0g"])

r = random.Random(4)
for _ in range(400):
    n = r.randint(1, 5)
    s = ".".join(part(r) for _ in range(n))
    if r.random() < 0.05:
        s += "."
    cases.append(s)
seen = set()
for c in cases:
    if c in seen:
        continue
    seen.add(c)
    print(c)
