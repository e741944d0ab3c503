#!/usr/bin/env bash
# MCP inspection benchmark (issue 27): MCP tools/call requests per second
# through a protocol mcp endpoint (body read and decided) vs through a
# plain protocol rest rule (POST /mcp) on the same upstream, side by side
# in each round (BenchmarkMCPToolsCall in pkg/proxy: keep-alive,
# HTTP/1.1, one request at a time, loopback). The order of the two rows
# alternates between rounds. Prints per-round ratios, their median and
# spread (min-max), for requests/s (target >= 0.80x) and for the
# process's CPU per request (rest / inspected), which the load of a shared
# machine moves less. ROUNDS (default 8), BENCHTIME (default 2s). Run it
# under flock /work/.heavy.lock on a shared machine. No root.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-8}
BENCHTIME=${BENCHTIME:-2s}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
go test -c -o "$tmp.test" ./pkg/proxy
trap 'rm -f "$tmp" "$tmp.test"' EXIT
for r in $(seq "$ROUNDS"); do
  rev=""
  [ $((r % 2)) -eq 0 ] && rev=1
  (cd pkg/proxy && PALISADE_BENCH_REVERSE=$rev "$tmp.test" -test.run '^$' -test.bench '^BenchmarkMCPToolsCall$' -test.benchtime "$BENCHTIME") |
    grep '^BenchmarkMCPToolsCall/' | sed "s/^/$r /" | tee -a "$tmp"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
function metric(line, unit,   i, n, f) { n = split(line, f, /[ \t]+/); for (i = 3; i <= n; i++) if (f[i] == unit) return f[i-1]; return 0 }
{ split($2, p, "/"); row = p[2]; sub(/-[0-9]+$/, "", row); rps[$1, row] = metric($0, "req/s"); cpu[$1, row] = metric($0, "cpu-us/req"); if ($1 > n) n = $1 }
function sort(a, m,   i, j, t) { for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } }
function median(a, m) { return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
END {
  for (k = 1; k <= n; k++) {
    rr[k] = rps[k, "inspected"] / rps[k, "rest"]; cr[k] = cpu[k, "rest"] / cpu[k, "inspected"]
    ri[k] = rps[k, "inspected"]; rs[k] = rps[k, "rest"]; ci[k] = cpu[k, "inspected"]; cs[k] = cpu[k, "rest"]
    printf "round %d: inspected %6.0f req/s %6.1f cpu-us/req, rest %6.0f req/s %6.1f cpu-us/req: %.2fx req/s, %.2fx CPU\n", k, ri[k], ci[k], rs[k], cs[k], rr[k], cr[k]
  }
  sort(rr, n); sort(cr, n); sort(ri, n); sort(rs, n); sort(ci, n); sort(cs, n)
  printf "median inspected %.0f req/s (%.1f cpu-us/req), rest %.0f req/s (%.1f cpu-us/req)\n", median(ri, n), median(ci, n), median(rs, n), median(cs, n)
  printf "MCP tools/call req/s, inspected / rest: median %.2fx, spread %.2f-%.2fx over %d rounds (target >= 0.80x)\n", median(rr, n), rr[1], rr[n], n
  printf "CPU per request, rest / inspected:      median %.2fx, spread %.2f-%.2fx\n", median(cr, n), cr[1], cr[n]
}' "$tmp"
