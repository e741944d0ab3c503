#!/usr/bin/env python3
# startup-pairs.py ROUNDS NAME=COMMAND... : the commands run interleaved,
# one of each per round (in a rotating order, reversed every other
# round, so none always follows or precedes the same one: a rotation
# alone keeps each command's neighbours, and the one started right after
# another, e.g. a baseline build after this one, was measured 2% apart
# from the other order), each started with posix_spawn and timed to its exit, with
# the CPU time (user+system) it and the children it reaped used. On a
# shared host whose load drifts, a ratio between commands measured in the
# same rounds is steadier than one between hyperfine medians taken one
# command after the other; CPU time is steadier still (it grows with
# contention for caches, not with time spent waiting for a CPU). Prints,
# for every command, the median wall time and middle half (25th-75th
# percentile) in ms and the median CPU time; for every pair NAME/REF given
# as RATIO=NAME/REF, the median of the per-round wall-time ratios and
# their middle half, and the ratio of the CPU medians. Every command must
# exit 0 (stdout and stderr are discarded).
import os, statistics, sys, time

rounds = int(sys.argv[1])
cmds, ratios = {}, []
for a in sys.argv[2:]:
    k, v = a.split("=", 1)
    if k == "RATIO":
        ratios.append(tuple(v.split("/")))
    else:
        cmds[k] = v.split()
devnull = os.open(os.devnull, os.O_RDWR)
acts = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
names = list(cmds)
times = {k: [] for k in names}
cpu = {k: [] for k in names}
warm = 10
for r in range(warm + rounds):
    order = names[r % len(names):] + names[:r % len(names)]
    if (r // len(names)) % 2:
        order.reverse()
    for k in order:
        t0 = time.perf_counter_ns()
        pid = os.posix_spawn(cmds[k][0], cmds[k], os.environ, file_actions=acts)
        _, status, ru = os.wait4(pid, 0)
        t1 = time.perf_counter_ns()
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{k}: {' '.join(cmds[k])} exited {os.waitstatus_to_exitcode(status)}")
        if r >= warm:
            times[k].append((t1 - t0) / 1e6)
            cpu[k].append((ru.ru_utime + ru.ru_stime) * 1e3)


def q(v):
    v = sorted(v)
    return v[len(v) // 4], statistics.median(v), v[(3 * len(v)) // 4]


for k in names:
    lo, m, hi = q(times[k])
    print(f"{k} median {m:.2f} ms, middle half {lo:.2f}-{hi:.2f} ms; CPU median {statistics.median(cpu[k]):.2f} ms")
for a, b in ratios:
    lo, m, hi = q([x / y for x, y in zip(times[a], times[b])])
    print(f"ratio {a}/{b} = {m:.2f}x (per-round ratios, middle half {lo:.2f}-{hi:.2f}x; ratio of medians {statistics.median(times[a]) / statistics.median(times[b]):.2f}x; CPU {statistics.median(cpu[a]) / statistics.median(cpu[b]):.2f}x)")
