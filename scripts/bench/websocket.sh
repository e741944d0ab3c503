#!/usr/bin/env bash
# WebSocket message inspection (issue 27): client-to-server text messages
# per second through egress-proxy on loopback, ws:// inside a CONNECT
# tunnel (BenchmarkWebSocketMessages in pkg/proxy):
#  - raw:     an endpoint without protocol, the tunnel relayed unread
#  - framing: protocol rest, every frame header checked (no messages read)
#  - prefix:  protocol websocket with a prefix matcher: every message
#             reassembled, UTF-8 checked, its start compared
#  - rules:   protocol websocket with a json matcher: every message
#             reassembled, UTF-8 checked, parsed and matched
# Target: rules >= 0.7x raw in messages/s. The ratio depends on the load:
# with CPU to spare it is set by the slowest goroutine (the proxy's relay
# against the test's server), on a busy machine it follows the CPU per
# message (docs/egress-proxy.md), so quote the load printed with it.
# ROUNDS rounds (default 8), the four modes side by side in each (the
# order rotated round by round);
# prints per-round ratios and their median and spread (min-max), and the
# CPU per message (client, proxy and server together). MSGS messages per
# mode and round (default 200000). The client writes 64 frames at a
# time (the worst case for the proxy: its per-message work against a
# relay that moves whole writes); with SINGLE=1 (the default) each round
# also runs raw1 and rules1, one message to a write as clients such as
# ws send them (SINGLE_MSGS each, default 200000), reported apart. Run
# it under the heavy lock:
#   flock /work/.heavy.lock scripts/bench/websocket.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-8}
MSGS=${MSGS:-200000}
SINGLE=${SINGLE:-1}
SINGLE_MSGS=${SINGLE_MSGS:-200000}
bin=$(mktemp)
tmp=$(mktemp)
trap 'rm -f "$bin" "$tmp"' EXIT
go test -c -o "$bin" ./pkg/proxy
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
modes=(raw framing prefix rules)
for r in $(seq "$ROUNDS"); do
  for i in 0 1 2 3; do
    m=${modes[$(((i + r) % 4))]}
    "$bin" -test.run '^$' -test.bench "^BenchmarkWebSocketMessages\$/^$m\$" -test.benchtime "${MSGS}x" |
      grep '^BenchmarkWebSocketMessages/' | sed "s/^/$r /" | tee -a "$tmp"
  done
  if [ "$SINGLE" = 1 ]; then
    for m in $([ $((r % 2)) = 1 ] && echo raw1 rules1 || echo rules1 raw1); do
      "$bin" -test.run '^$' -test.bench "^BenchmarkWebSocketMessages\$/^$m\$" -test.benchtime "${SINGLE_MSGS}x" |
        grep '^BenchmarkWebSocketMessages/' | sed "s/^/$r /" | tee -a "$tmp"
    done
  fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
function metric(line, unit,   i, n, f) { n = split(line, f, /[ \t]+/); for (i = 2; i <= n; i++) if (f[i] == unit) return f[i-1]; return 0 }
function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
{ r = $1; split($2, p, "/"); m = p[2]; sub(/-[0-9]+$/, "", m); mps[m, r] = metric($0, "msgs/s"); cpu[m, r] = metric($0, "cpu-ns/op"); if (r > rounds) rounds = r }
END {
  split("rules/raw prefix/raw rules/framing framing/raw", rn, " ")
  for (r = 1; r <= rounds; r++) { q[1, r] = mps["rules", r] / mps["raw", r]; q[2, r] = mps["prefix", r] / mps["raw", r]
    q[3, r] = mps["rules", r] / mps["framing", r]; q[4, r] = mps["framing", r] / mps["raw", r]
    printf "round %d: rules/raw %.2fx  prefix/raw %.2fx  rules/framing %.2fx  framing/raw %.2fx\n", r, q[1, r], q[2, r], q[3, r], q[4, r] }
  if (mps["raw1", 1] > 0) { rn[5] = "rules1/raw1 (one message to a write)"; nq = 5; for (r = 1; r <= rounds; r++) q[5, r] = mps["rules1", r] / mps["raw1", r] } else nq = 4
  for (k = 1; k <= nq; k++) { n = 0; lo = 1e9; hi = 0
    for (r = 1; r <= rounds; r++) { v = q[k, r]; x[++n] = v; if (v < lo) lo = v; if (v > hi) hi = v }
    printf "%s: median %.2fx, spread %.2f-%.2fx\n", rn[k], median(x, n), lo, hi }
  nm = split(nq == 5 ? "raw framing prefix rules raw1 rules1" : "raw framing prefix rules", ms, " ")
  for (k = 1; k <= nm; k++) { n = 0; m2 = ms[k]; for (r = 1; r <= rounds; r++) { y[++n] = mps[m2, r]; z[n] = cpu[m2, r] }
    printf "%s: median %.0f msgs/s, %.0f ns of CPU per message\n", m2, median(y, n), median(z, n) }
}' "$tmp"
