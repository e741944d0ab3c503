#!/usr/bin/env bash
# A reference point for issue 27's json matcher cost: simdjson (C++,
# runtime-dispatched AVX2/AVX-512 kernels), the fastest JSON parser we
# know of, reading the WebSocket benchmarks' 64 subscribe messages
# (54-71 bytes; scripts/bench/simdjson/msgs.inc, the messages of
# pkg/proxy's wsBenchBatch) in turn: fully validated (DOM; On-Demand
# walking every field) and, for comparison, On-Demand fetching only
# "type" and "channel" (not validating what it skips), UTF-8 validation
# alone, and the harness's floor. Each row: median and min-max of 7
# runs of at least 2 s, ns per message. Set beside BenchmarkJSONScan's
# scanner-64 (flatScan) and shape-64 (a relay's shape) in
# docs/egress-proxy.md.
#
# Needs g++ and Debian's libsimdjson-dev (apt-get install
# libsimdjson-dev); not run by the tests. Under the heavy lock on a
# shared machine:
#   flock /work/.heavy.lock scripts/bench/simdjson.sh
set -euo pipefail
cd "$(dirname "$0")/simdjson"
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
g++ -O3 -march=native -std=c++17 bench.cpp -lsimdjson -o "$tmpd/bench"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
"$tmpd/bench"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
