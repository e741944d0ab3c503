#!/usr/bin/env bash
# What chaining through a corporate proxy costs a new tunnel
# (BenchmarkChainedConnect): sequential new CONNECT tunnels plus a 1 KiB
# echo round trip each, from inside a sandbox-like namespace and cgroup,
# through egress-proxy dialling directly ("unchained") and through a
# second egress-proxy chaining through a real squid with Basic auth
# ("chained"), side by side in each round. ROUNDS rounds (default 5) of
# CONNS connections per row (default 1000). Prints, per row, the median
# and the spread (min-max over the rounds) of the rate, the CONNECT
# answer, the proxy's and squid's CPU per connection, and the median and
# spread of the per-round ratios chained / unchained. Needs root, a
# build (make build), python3, squid and openssl.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PALISADE_BIN_DIR=${PALISADE_BIN_DIR:-$PWD/bin}
[ -x "$PALISADE_BIN_DIR/egress-proxy" ] || { echo "build first: make build" >&2; exit 2; }
ROUNDS=${ROUNDS:-5}
CONNS=${CONNS:-1000}
out=$(mktemp)
rounds=$(mktemp)
trap 'rm -f "$out" "$rounds"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
echo "== chained vs unchained tunnel set-up (${CONNS} connections per row, at most 20 s), $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  go test -run '^$' -bench 'ChainedConnect' -benchtime "${CONNS}x" -timeout 10m ./cmd/egress-proxy >"$out"
  grep -E '^BenchmarkChainedConnect/' "$out" | sed "s/^/round $r: /"
  # One line per round and row: rate, CONNECT answer, proxy CPU, squid CPU.
  awk -v r="$r" '/ChainedConnect\// { split($1, a, "/"); sub(/-[0-9]+$/, "", a[2]); k = a[2]
      for (i = 2; i <= NF; i++) { if ($i == "conns/s") v[k] = $(i - 1); if ($i == "connect-answer-us") ans[k] = $(i - 1)
        if ($i == "proxy-cpu-us") c[k] = $(i - 1); if ($i == "squid-cpu-us") s[k] = $(i - 1) } }
    END { for (k in v) printf "%s %d %s %s %s %s\n", k, r, v[k], ans[k], c[k], s[k] }' "$out" >>"$rounds"
done
awk 'function median(arr, n,   i, j, t, w) { for (i = 1; i <= n; i++) w[i] = arr[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (w[j] < w[i]) { t = w[i]; w[i] = w[j]; w[j] = t }
    return (n % 2) ? w[(n + 1) / 2] : (w[n / 2] + w[n / 2 + 1]) / 2 }
  function lo(arr, n,   i, m) { m = arr[1]; for (i = 2; i <= n; i++) if (arr[i] < m) m = arr[i]; return m }
  function hi(arr, n,   i, m) { m = arr[1]; for (i = 2; i <= n; i++) if (arr[i] > m) m = arr[i]; return m }
  { rate[$1, $2] = $3; ans[$1, $2] = $4; cpu[$1, $2] = $5; sq[$1, $2] = $6; if ($2 > n) n = $2 }
  END {
    split("unchained chained", rows, " ")
    for (j = 1; j <= 2; j++) { k = rows[j]
      for (i = 1; i <= n; i++) { a[i] = rate[k, i]; b[i] = ans[k, i]; c[i] = cpu[k, i]; d[i] = sq[k, i] }
      printf "%-9s median (min-max) of %d rounds: %.0f (%.0f-%.0f) conns/s, CONNECT answer %.0f (%.0f-%.0f) us, proxy CPU %.0f (%.0f-%.0f) us/conn, squid CPU %.0f (%.0f-%.0f) us/conn\n",
        k, n, median(a, n), lo(a, n), hi(a, n), median(b, n), lo(b, n), hi(b, n), median(c, n), lo(c, n), hi(c, n), median(d, n), lo(d, n), hi(d, n) }
    for (i = 1; i <= n; i++) { a[i] = rate["chained", i] / rate["unchained", i]; b[i] = ans["chained", i] - ans["unchained", i]
      c[i] = cpu["chained", i] - cpu["unchained", i] }
    printf "chained / unchained, per round: rate %.2fx (%.2f-%.2f), CONNECT answer +%.0f us (%.0f-%.0f), proxy CPU +%.0f us/conn (%.0f-%.0f)\n",
      median(a, n), lo(a, n), hi(a, n), median(b, n), lo(b, n), hi(b, n), median(c, n), lo(c, n), hi(c, n) }' "$rounds"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
