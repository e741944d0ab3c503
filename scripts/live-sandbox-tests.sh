#!/usr/bin/env bash
# The sandbox test packages, run while a real sandbox with network
# policies lives on the same host, as it does on a worker: a detached
# sandbox (default state root, like a real supervisor) whose main process
# keeps its egress proxy, fence, policy DNS and transparent listener busy
# with denials. The tests must pass beside it, and it must come out
# untouched: still running, same id, exec still works, and its proxy saw
# the traffic. The sandbox is deleted by its id on every way out.
#
# Usage (root, from the repository, after make build):
#   scripts/live-sandbox-tests.sh [go test packages...]
# PALISADE_BIN_DIR defaults to ./bin. .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${PALISADE_BIN_DIR:-$PWD/bin}
sup=$bin/sandbox-supervisor
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
	# Every package whose tests create sandboxes, namespaces, cgroups,
	# nftables state or synthetic addresses.
	pkgs=(./pkg/sandboxnet ./pkg/sandbox ./pkg/fence ./pkg/attribution ./pkg/cgroup ./pkg/nettest
		./pkg/finalizer ./cmd/sandbox-supervisor ./cmd/egress-proxy ./cmd/confinement-probe
		./cmd/finalizer-recover ./deploy)
fi

say() { echo "live-sandbox: $*"; }

name=ci-live-$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')
id=""
dir=$(mktemp -d /run/palisade-ci-live.XXXXXX) # root only (0700), outside the sandbox's paths
work=$(mktemp -d /var/tmp/palisade-ci-work.XXXXXX)

tests=""
cleanup() {
	local rc=$?
	set +e # every step runs, whatever the one before did
	trap - EXIT INT TERM
	if [ -n "$tests" ]; then
		kill -TERM "$tests" 2>/dev/null # testsum passes it to go test
		wait "$tests" 2>/dev/null
	fi
	if [ -n "$id" ]; then
		# By id: a sandbox that took the name since is left alone.
		"$sup" delete --expect-id "$id" "$name" >/dev/null 2>&1 || say "delete $name ($id) failed"
	fi
	rm -rf "$dir" "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

chown 10001:10001 "$work"
cat >"$dir/hosts" <<'EOF'
127.0.0.1 allowed.ci.invalid
198.51.100.7 echo.ci.invalid
EOF
# curl may reach allowed.ci.invalid:80 (which resolves to loopback: the
# SSRF guard refuses it, so nothing is dialled); echo.ci.invalid:7007 is
# a protocol: tcp endpoint (policy DNS answers it with a synthetic
# address; the transparent listener takes the connection) for curl
# only, so python3's connections to it are refused binary_not_allowed.
# No name is resolved outside the hosts file and nothing leaves the host.
cat >"$dir/policy.yaml" <<'EOF'
version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /bin, /sbin, /lib, /lib64, /etc]
  read_write: [/tmp]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: sandbox
network_policies:
  ci_http:
    endpoints:
      - host: allowed.ci.invalid
        port: 80
    binaries:
      - path: /usr/bin/curl
  ci_tcp:
    endpoints:
      - host: echo.ci.invalid
        port: 7007
        protocol: tcp
    binaries:
      - path: /usr/bin/curl
EOF
chmod 600 "$dir/policy.yaml" "$dir/hosts"

# At most 2 hours of traffic, two rounds a second; delete ends it sooner.
traffic='i=0; while [ $i -lt 14400 ]; do
  curl -s -m 2 -o /dev/null http://denied.ci.invalid/ || true
  curl -s -m 2 -o /dev/null http://allowed.ci.invalid/ || true
  python3 -c "import socket; socket.create_connection((\"echo.ci.invalid\", 7007), timeout=2)" 2>/dev/null || true
  python3 -c "import socket; socket.create_connection((\"198.51.100.7\", 7), timeout=2)" 2>/dev/null || true
  echo round $i; i=$((i+1)); sleep 0.5
done'
out=$("$sup" run --detach --json --name "$name" --policy "$dir/policy.yaml" --hosts-file "$dir/hosts" \
	--events "$dir/events.jsonl" --workdir "$work" -- /bin/sh -c "$traffic")
id=$(printf '%s' "$out" | sed -n 's/.*"id":"\([0-9a-f]*\)".*/\1/p')
[ -n "$id" ] || { say "run --detach printed no id: $out"; exit 1; }
say "sandbox $name ($id) runs; the tests run beside it"

# In the background, so that a signal to this script is handled at once
# (bash runs traps only between foreground commands).
go build -o "$dir/testsum" ./scripts/testsum
PALISADE_REQUIRE_PRIVILEGED=1 PALISADE_BIN_DIR=$bin "$dir/testsum" -- -count=1 -timeout 30m "${pkgs[@]}" &
tests=$!
status=0
wait "$tests" || status=$?
tests=""

# The live sandbox came out untouched.
check() { say "$1"; status=1; }
st=$("$sup" status --json "$name" 2>&1) || check "status $name failed: $st"
case "$st" in *"\"id\":\"$id\""*'"status":"running"'*) ;; *) check "sandbox $name is not running with id $id: $st" ;; esac
"$sup" exec --expect-id "$id" --no-login-shell "$name" -- /bin/true || check "exec into $name failed (exit $?)"
denials=$(grep -c '"status_code":"policy_denied"' "$dir/events.jsonl" || true)
bypass=$(grep -c '"status_code":"bypass_denied"' "$dir/events.jsonl" || true)
transparent=$(grep -c '"listener":"transparent"' "$dir/events.jsonl" || true)
say "its proxy recorded $denials policy denials, $bypass fence captures, $transparent transparent connections"
if [ "$denials" -eq 0 ] || [ "$bypass" -eq 0 ] || [ "$transparent" -eq 0 ]; then
	check "the live sandbox's traffic did not reach its proxy"
fi
exit "$status"
