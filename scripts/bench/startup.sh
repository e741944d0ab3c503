#!/usr/bin/env bash
# Sandbox start-up latency: hyperfine medians of
#   sandbox-supervisor run -- /bin/true   (bundled default policy)
#   bwrap --unshare-all --ro-bind / / /bin/true
#   /bin/true
# side by side in one run, and the ratio supervisor/bwrap.
# Target to resolve the supervisor issue: <= 1.5x bwrap; product goal <= 1.0x.
# Needs root, hyperfine and bwrap (apt: hyperfine bubblewrap).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PALISADE_BIN_DIR:-$PWD/bin}
RUNS=${RUNS:-200}
[ -x "$BIN/sandbox-supervisor" ] || { echo "build first: make build" >&2; exit 2; }
for t in hyperfine bwrap jq; do command -v $t >/dev/null || { echo "missing $t" >&2; exit 2; }; done
work=$(mktemp -d); state=$(mktemp -d)
trap 'rm -rf "$work" "$state"' EXIT
chown 10001:10001 "$work"
json=$(mktemp)
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$json" \
  -n supervisor "$BIN/sandbox-supervisor run --state-dir $state --workdir $work -- /bin/true" \
  -n bwrap "bwrap --unshare-all --ro-bind / / /bin/true" \
  -n bare "/bin/true" >&2
sup=$(jq '.results[] | select(.command=="supervisor") | .median' "$json")
bw=$(jq '.results[] | select(.command=="bwrap") | .median' "$json")
bare=$(jq '.results[] | select(.command=="bare") | .median' "$json")
rm -f "$json"
awk -v s="$sup" -v b="$bw" -v t="$bare" 'BEGIN {
  printf "median supervisor %.2f ms, bwrap %.2f ms, bare %.2f ms\n", s*1000, b*1000, t*1000
  printf "ratio supervisor/bwrap = %.2fx (target <= 1.5x, goal <= 1.0x)\n", s/b
}'
