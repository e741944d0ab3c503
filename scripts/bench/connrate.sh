#!/usr/bin/env bash
# Sequential new connections per second from inside a sandbox-like
# namespace and cgroup (BenchmarkSandboxConnectRate: connect + 1 KiB echo
# round trip each, python3), with no extra processes and with 2,000
# sleeping ones: direct vs egress-proxy (sandbox mode, eBPF attribution,
# events written to a file as sandbox-supervisor has them; CONNECT, and
# transparent: the name's policy DNS address redirected to the proxy's
# transparent listener) vs a minimal Go relay in the transparent
# listener's place (floor: accept, SO_ORIGINAL_DST, dial, splice both
# ways, no decision), the same relay with the kernel relaying once the
# sockets are dialed (floor-sockmap: a sockhash and an sk_skb verdict),
# and both on one thread with an epoll of their own instead of Go's
# poller (floor-raw, floor-sockmap-raw) vs squid vs tinyproxy on the
# host side of the same veth. ROUNDS rounds (default 5) of CONNS connections per row
# (default 2000), rows side by side in each round; medians of the rates
# and of the per-round ratios. Needs root and a build (make build);
# tinyproxy and squid from apt for their rows. PALISADE_BENCH_DEFER_ROWS=1
# adds floor-defer and floor-raw-defer (TCP_DEFER_ACCEPT on the floor
# relays' listeners); their lines are printed per round, not summarised.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PALISADE_BIN_DIR=${PALISADE_BIN_DIR:-$PWD/bin}
[ -x "$PALISADE_BIN_DIR/egress-proxy" ] || { echo "build first: make build" >&2; exit 2; }
ROUNDS=${ROUNDS:-5}
out=$(mktemp)
rounds=$(mktemp)
trap 'rm -f "$out" "$rounds"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
CONNS=${CONNS:-2000}
echo "== sequential connections per second from a sandbox (${CONNS} each, at most 20 s), $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  go test -run '^$' -bench 'SandboxConnectRate' -benchtime "${CONNS}x" -timeout 20m ./cmd/egress-proxy >"$out"
  grep -E '^BenchmarkSandboxConnectRate/' "$out" | sed "s/^/round $r: /"
  # One line per round and sandbox: the rates of direct, egress-proxy,
  # squid and tinyproxy (0 when not installed).
  # Then each proxy's CPU time per connection and its median CONNECT
  # answer over all connections and over the first 100 (the ramp).
  awk -v r="$r" '/SandboxConnectRate\// { split($1, a, "/"); sub(/-[0-9]+$/, "", a[3]); k = a[2] "/" a[3]
      for (i = 2; i <= NF; i++) { if ($i == "conns/s") v[k] = $(i - 1); if ($i == "proxy-cpu-us") c[k] = $(i - 1); if ($i == "kworker-cpu-us") kw[k] = $(i - 1); if ($i == "switches") sw[k] = $(i - 1)
        if ($i == "connect-answer-us") ans[k] = $(i - 1); if ($i == "first100-answer-us") f[k] = $(i - 1) } }
  END { for (p = 0; p <= 1; p++) { k = p ? "procs=2000" : "procs=0"
    printf "%s %d %s %s %s %s", k, r, v[k "/direct"] + 0, v[k "/egress-proxy"] + 0, v[k "/squid"] + 0, v[k "/tinyproxy"] + 0
    split("egress-proxy squid tinyproxy", names, " ")
    for (j = 1; j <= 3; j++) { x = k "/" names[j]; printf " %s %s %s", c[x] + 0, ans[x] + 0, f[x] + 0 }
    printf " %s %s %s %s", v[k "/transparent"] + 0, c[k "/transparent"] + 0, v[k "/floor"] + 0, c[k "/floor"] + 0
    # Columns 20-23: the floor-sockmap rows (rate, relay CPU); 24-27:
    # the CPU per connection of the kworkers in the direct, floor, floor-sockmap
    # and floor-sockmap-raw.
    printf " %s %s %s %s", v[k "/floor-sockmap"] + 0, c[k "/floor-sockmap"] + 0, v[k "/floor-sockmap-raw"] + 0, c[k "/floor-sockmap-raw"] + 0
    printf " %s %s %s %s", kw[k "/direct"] + 0, kw[k "/floor"] + 0, kw[k "/floor-sockmap"] + 0, kw[k "/floor-sockmap-raw"] + 0
    # 28-31: the machine context switches per connection of the same rows.
    printf " %s %s %s %s", sw[k "/direct"] + 0, sw[k "/floor"] + 0, sw[k "/floor-sockmap"] + 0, sw[k "/floor-sockmap-raw"] + 0
    # 32-35: floor-raw (rate, relay CPU, kworker CPU, context switches).
    printf " %s %s %s %s\n", v[k "/floor-raw"] + 0, c[k "/floor-raw"] + 0, kw[k "/floor-raw"] + 0, sw[k "/floor-raw"] + 0 } }' "$out" >>"$rounds"
done
# Medians over the rounds of each rate and of each per-round ratio
# (egress-proxy / direct, / squid, / tinyproxy). Targets: >= 0.45x
# direct (a CONNECT costs one more round trip: 0.5x is the ceiling),
# ahead of squid and tinyproxy (ratios > 1), the same with 2,000
# processes as with none.
awk 'function median(arr, n,   i, j, t, w) { for (i = 1; i <= n; i++) w[i] = arr[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (w[j] < w[i]) { t = w[i]; w[i] = w[j]; w[j] = t }
    return (n % 2) ? w[(n + 1) / 2] : (w[n / 2] + w[n / 2 + 1]) / 2 }
  # The q-quantile (0 <= q <= 1) of arr[1..n], interpolated.
  function quantile(arr, n, q,   i, j, t, w, h) { for (i = 1; i <= n; i++) w[i] = arr[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (w[j] < w[i]) { t = w[i]; w[i] = w[j]; w[j] = t }
    h = 1 + (n - 1) * q; i = int(h); return (i >= n) ? w[n] : w[i] + (h - i) * (w[i + 1] - w[i]) }
  { k = $1; n = ++cnt[k]; d[k, n] = $3; e[k, n] = $4; sq[k, n] = $5; tp[k, n] = $6
    for (j = 1; j <= 3; j++) { v7[k, n, j] = $(4 + 3 * j); v8[k, n, j] = $(5 + 3 * j); v9[k, n, j] = $(6 + 3 * j) }
    tr[k, n] = $16; tc[k, n] = $17; fl[k, n] = $18; fc[k, n] = $19
    sm[k, n, 1] = $20; sc[k, n, 1] = $21; sm[k, n, 2] = $22; sc[k, n, 2] = $23
    kd[k, n] = $24; kf[k, n] = $25; sk[k, n, 1] = $26; sk[k, n, 2] = $27
    swd[k, n] = $28; swf[k, n] = $29; sws[k, n, 1] = $30; sws[k, n, 2] = $31
    sm[k, n, 3] = $32; sc[k, n, 3] = $33; sk[k, n, 3] = $34; sws[k, n, 3] = $35 }
  END { for (p = 0; p <= 1; p++) { k = p ? "procs=2000" : "procs=0"; n = cnt[k]; if (!n) continue
      split("", a); split("", b); split("", c); split("", rd); split("", rs); split("", rt); split("", t); ns = 0; nt = 0
      for (i = 1; i <= n; i++) { a[i] = d[k, i]; b[i] = e[k, i]; rd[i] = (d[k, i] > 0) ? e[k, i] / d[k, i] : 0
        if (sq[k, i] > 0) { c[++ns] = sq[k, i]; rs[ns] = e[k, i] / sq[k, i] }
        if (tp[k, i] > 0) { t[++nt] = tp[k, i]; rt[nt] = e[k, i] / tp[k, i] } }
      printf "%s, median of %d rounds: direct %.0f/s, egress-proxy %.0f/s = %.2fx direct (target >= 0.45x)", k, n, median(a, n), median(b, n), median(rd, n)
      if (ns) printf "; squid %.0f/s, egress-proxy / squid %.2fx", median(c, ns), median(rs, ns)
      if (nt) printf "; tinyproxy %.0f/s, egress-proxy / tinyproxy %.2fx", median(t, nt), median(rt, nt)
      printf "\n"
      # The transparent row (policy DNS + the transparent listener of the
      # same proxy: no CONNECT round trip). Target: >= 0.6x direct.
      split("", x); split("", y); split("", z); m = 0
      for (i = 1; i <= n; i++) if (tr[k, i] > 0 && d[k, i] > 0) { m++; x[m] = tr[k, i]; y[m] = tr[k, i] / d[k, i]; z[m] = tc[k, i] }
      if (m) printf "%s, median of %d rounds: transparent %.0f/s = %.2fx direct (quartiles %.2f-%.2f, range %.2f-%.2f; target >= 0.6x), proxy CPU per connection %.0f us\n", k, m, median(x, m), median(y, m), quantile(y, m, 0.25), quantile(y, m, 0.75), quantile(y, m, 0), quantile(y, m, 1), median(z, m)
      # The floor row: a minimal Go relay in place of the transparent listener
      # (accept, SO_ORIGINAL_DST, dial, splice both ways; no
      # decision), what this design reaches at best.
      split("", x); split("", y); split("", z); m = 0
      for (i = 1; i <= n; i++) if (fl[k, i] > 0 && d[k, i] > 0) { m++; x[m] = fl[k, i]; y[m] = fl[k, i] / d[k, i]; z[m] = fc[k, i] }
      if (m) printf "%s, median of %d rounds: floor (minimal relay) %.0f/s = %.2fx direct (quartiles %.2f-%.2f, range %.2f-%.2f), relay CPU per connection %.0f us\n", k, m, median(x, m), median(y, m), quantile(y, m, 0.25), quantile(y, m, 0.75), quantile(y, m, 0), quantile(y, m, 1), median(z, m)
      # The floor-sockmap rows: the same relay handing both sockets to
      # the kernel once dialed (a sockhash and an sk_skb verdict
      # redirecting the bytes of each to the other), waiting only for
      # the ends in Go (floor-sockmap) or with raw system calls on one
      # thread and an epoll of its own (floor-sockmap-raw); floor-raw,
      # that thread copying in user space itself; their ratios to the
      # floor per round, and the CPU of the relay and of the kworkers
      # (which send the redirected bytes) per connection.
      split("", x); split("", y); for (i = 1; i <= n; i++) { x[i] = swd[k, i]; y[i] = swf[k, i] }
      printf "%s, medians: context switches per connection (the whole machine): direct %.1f, floor %.1f\n", k, median(x, n), median(y, n)
      split("floor-sockmap floor-sockmap-raw floor-raw", smn, " ")
      for (j = 1; j <= 3; j++) { split("", x); split("", y); split("", z); split("", w); split("", cr); split("", kk); split("", kf0); split("", ss); split("", tot); m = 0
        for (i = 1; i <= n; i++) if (sm[k, i, j] > 0 && d[k, i] > 0) { m++; x[m] = sm[k, i, j]; y[m] = sm[k, i, j] / d[k, i]; z[m] = sc[k, i, j]
          w[m] = (fl[k, i] > 0) ? sm[k, i, j] / fl[k, i] : 0; cr[m] = (fc[k, i] > 0) ? sc[k, i, j] / fc[k, i] : 0; kk[m] = sk[k, i, j]; kf0[m] = kf[k, i]; ss[m] = sws[k, i, j]
          tot[m] = (fc[k, i] > 0) ? (sc[k, i, j] + sk[k, i, j] - kf[k, i]) / fc[k, i] : 0 }
        if (m) printf "%s, median of %d rounds: %s %.0f/s = %.2fx direct (quartiles %.2f-%.2f, range %.2f-%.2f), %.2fx floor (quartiles %.2f-%.2f); relay CPU per connection %.0f us = %.2fx floor (quartiles %.2f-%.2f); kworker CPU per connection %.0f us (floor row %.0f us), relay and kworker CPU together %.2fx floor (quartiles %.2f-%.2f); %.1f context switches per connection\n", k, m, smn[j], median(x, m), median(y, m), quantile(y, m, 0.25), quantile(y, m, 0.75), quantile(y, m, 0), quantile(y, m, 1), median(w, m), quantile(w, m, 0.25), quantile(w, m, 0.75), median(z, m), median(cr, m), quantile(cr, m, 0.25), quantile(cr, m, 0.75), median(kk, m), median(kf0, m), median(tot, m), quantile(tot, m, 0.25), quantile(tot, m, 0.75), median(ss, m) }
      # What the kernel splice itself gives: floor-sockmap-raw against
      # floor-raw, the same relay without Go copying in user space.
      split("", x); split("", y); m = 0
      for (i = 1; i <= n; i++) if (sm[k, i, 2] > 0 && sm[k, i, 3] > 0 && sc[k, i, 3] > 0) { m++; x[m] = sm[k, i, 2] / sm[k, i, 3]
        y[m] = (sc[k, i, 2] + sk[k, i, 2]) / (sc[k, i, 3] + sk[k, i, 3]) }
      if (m) printf "%s, median of %d rounds: floor-sockmap-raw / floor-raw: rate %.2fx (quartiles %.2f-%.2f, range %.2f-%.2f), relay and kworker CPU %.2fx (quartiles %.2f-%.2f)\n", k, m, median(x, m), quantile(x, m, 0.25), quantile(x, m, 0.75), quantile(x, m, 0), quantile(x, m, 1), median(y, m), quantile(y, m, 0.25), quantile(y, m, 0.75)
      # Columns 7.. hold, per proxy (egress-proxy, squid, tinyproxy): CPU
      # microseconds per connection, median CONNECT answer, and that of
      # the first 100 connections.
      split("egress-proxy squid tinyproxy", names, " ")
      printf "%s, medians: proxy CPU per connection, CONNECT answer (all / first 100):", k
      for (j = 1; j <= 3; j++) { split("", x); split("", y); split("", z); m = 0
        for (i = 1; i <= n; i++) if (v7[k, i, j] > 0) { m++; x[m] = v7[k, i, j]; y[m] = v8[k, i, j]; z[m] = v9[k, i, j] }
        if (m) printf " %s %.0f us, %.0f / %.0f us;", names[j], median(x, m), median(y, m), median(z, m) }
      printf "\n" } }' "$rounds"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
