#!/usr/bin/env bash
# This build's egress-proxy against another commit's, side by side in one
# run (BenchmarkAgainstBaseline, cmd/egress-proxy): bulk download and
# upload throughput through a CONNECT tunnel from a sandbox, new tunnels
# per second, and new transparent connections (policy DNS, no CONNECT)
# per second, with CPU per MiB (proxy and curl) and the proxy's per
# connection;
# per-round ratios (this / baseline) with median, quartiles and range.
#
#   scripts/bench/baseline.sh COMMIT          # builds COMMIT in a worktree
#   BASELINE_BIN=DIR scripts/bench/baseline.sh  # an existing bin directory
#
# ROUNDS (default 20), PAIRS (units per build per round, default 2: ABBA),
# MB (per download/upload, default 256), CONNS (per connection-rate unit,
# default 500), ROWS (a -bench pattern under AgainstBaseline, default
# all; alternatives in parentheses, ROWS='(connrate|upload)': go test
# splits a bare '|' at the top level, so only the first would run), BASELINE_ARGS (flags for the baseline's proxy only: with
# BASELINE_BIN=bin and BASELINE_ARGS='--send-guard off' it measures the
# send guard). Run it under the host's benchmark lock:
#   flock /work/.heavy.lock scripts/bench/baseline.sh 7487d13
# It runs at nice -10 (both builds alike) so that other work on a shared
# machine takes less from the measured rounds. Needs root and a build
# (make build); curl and python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PALISADE_BIN_DIR=${PALISADE_BIN_DIR:-$PWD/bin}
[ -x "$PALISADE_BIN_DIR/egress-proxy" ] || { echo "build first: make build" >&2; exit 2; }
if [ -z "${BASELINE_BIN:-}" ]; then
  [ $# -eq 1 ] || { echo "usage: $0 COMMIT (or BASELINE_BIN=DIR $0)" >&2; exit 2; }
  rev=$(git rev-parse --short "$1^{commit}")
  wt=${TMPDIR:-/tmp}/palisade-baseline-$rev
  [ -d "$wt" ] || git worktree add --detach "$wt" "$rev" >/dev/null
  (cd "$wt" && go build -trimpath -o bin/ ./cmd/egress-proxy)
  BASELINE_BIN=$wt/bin
fi
test=$(mktemp)
trap 'rm -f "$test"' EXIT
go test -c -o "$test" ./cmd/egress-proxy
echo "baseline $BASELINE_BIN ${BASELINE_ARGS:-}, current $PALISADE_BIN_DIR; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
cd cmd/egress-proxy
PALISADE_BENCH_BASELINE_BIN_DIR=$BASELINE_BIN PALISADE_BENCH_BASELINE_PROXY_ARGS=${BASELINE_ARGS:-} \
  PALISADE_BENCH_ROUNDS=${ROUNDS:-20} PALISADE_BENCH_PAIRS=${PAIRS:-2} PALISADE_BENCH_MB=${MB:-256} \
  PALISADE_BENCH_CONNS=${CONNS:-500} \
  nice -n -10 "$test" -test.run '^$' -test.bench "AgainstBaseline/${ROWS:-}" -test.benchtime 1x |
  awk '/^Benchmark/ { name = $1; sub(/^BenchmarkAgainstBaseline\//, "", name); sub(/-[0-9]+$/, "", name)
      for (i = 3; i < NF; i += 2) v[$(i + 1)] = $i
      printf "%s: current / baseline per round, rate %.3fx (quartiles %.3f-%.3f, range %.3f-%.3f), CPU %.3fx (quartiles %.3f-%.3f, range %.3f-%.3f)\n",
        name, v["rate-x-median"], v["rate-x-q1"], v["rate-x-q3"], v["rate-x-min"], v["rate-x-max"],
        v["cpu-x-median"], v["cpu-x-q1"], v["cpu-x-q3"], v["cpu-x-min"], v["cpu-x-max"]
      for (k in v) if (k ~ /^(baseline|current)-/) printf "  %s %s\n", k, v[k]
      split("", v); next }
    { print }'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
