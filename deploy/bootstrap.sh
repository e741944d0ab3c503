#!/usr/bin/env bash
# Set up a Palisade worker host from this checkout, failing closed on
# evidence (seed 000: bootstrap "runs live-confinement-probe.sh inside a
# second throwaway sandbox and fails closed unless the runtime proves the
# expected filesystem, egress, privilege, seccomp, user-namespace, and
# raw-socket boundaries"; enforcement is enabled only after the probe log
# ends with CONFINEMENT_PROBE_OK).
#
# Steps: preflight (Linux, root, tools, kernel features) -> build and
# install the binaries (make install, or --bin-dir) -> the sandbox user
# and group (10001) when missing -> /etc/palisade/palisade.env -> the
# systemd units -> confinement-probe -> enable the units (--enable), only
# after CONFINEMENT_PROBE_OK. Idempotent: files that are already right are
# left alone. Everything replaced or created is recorded in a backup
# directory (/var/backups/palisade/bootstrap-TIME) that --rollback
# restores.
#
# DESTDIR=/some/root performs every step inside that root instead of /
# (tests, image builds): files, users (edited in its etc/passwd and
# etc/group), units (systemctl --root), the probe's HOME and log. The probe
# itself always runs for real on this host.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: deploy/bootstrap.sh [--enable] [--fail-closed] [--dry-run] [--bin-dir DIR] [--prefix DIR]
       deploy/bootstrap.sh --rollback [DIR] [--dry-run]

  --enable       enable the units once the confinement probe passed
                 (confinement-probe.service, sandbox-supervisor-gc.timer;
                 ocsf-collector.service and policy-sync.service when
                 MAC_HUB_URL and MAC_AGENT_ID are set in palisade.env)
  --fail-closed  a missing kernel feature aborts (else a warning), and
                 palisade.env gets MAC_OPENSHELL_REQUIRED=1
  --dry-run      print every step, change nothing
  --bin-dir DIR  install prebuilt binaries from DIR instead of make install
  --prefix DIR   install prefix (default /usr/local; the units assume it)
  --rollback [DIR]
                 restore what a bootstrap replaced, remove what it created,
                 disable what it enabled (default: the latest backup)

Environment: DESTDIR (a root to set up instead of /).

Examples:
  sudo deploy/bootstrap.sh --enable --fail-closed
  sudo deploy/bootstrap.sh --enable --fail-closed --dry-run
  sudo deploy/bootstrap.sh --rollback
  sudo DESTDIR=/tmp/root deploy/bootstrap.sh --bin-dir ./bin

Exit status: 0 done; 1 a step failed (nothing enabled); 2 usage error.
EOF
}

enable=0 fail_closed=0 dry=0 rollback=0 rollback_dir="" bin_dir="" prefix=/usr/local
while [ $# -gt 0 ]; do
	case "$1" in
	--enable) enable=1 ;;
	--fail-closed) fail_closed=1 ;;
	--dry-run) dry=1 ;;
	--bin-dir) [ $# -ge 2 ] || { echo "bootstrap: --bin-dir needs a directory" >&2; exit 2; }; bin_dir=$2; shift ;;
	--prefix) [ $# -ge 2 ] || { echo "bootstrap: --prefix needs a directory" >&2; exit 2; }; prefix=$2; shift ;;
	--rollback)
		rollback=1
		if [ $# -ge 2 ] && [ "${2#--}" = "$2" ]; then rollback_dir=$2; shift; fi ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bootstrap: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

src=$(cd "$(dirname "$0")/.." && pwd)
root=${DESTDIR:-}
root=${root%/}
bindir=$root$prefix/bin
unitdir=$root/etc/systemd/system
etcdir=$root/etc/palisade
envfile=$etcdir/palisade.env
home=$root/root
probelog=$home/.mac/openshell/live-confinement-probe.log
backups=$root/var/backups/palisade
backup="" # created on the first change

say() { echo "bootstrap: $*"; }
die() { echo "bootstrap: FAILED: $*" >&2; exit 1; }

# do_ runs a command, or prints it under --dry-run.
do_() {
	if [ "$dry" = 1 ]; then
		echo "  would run: $*"
	else
		"$@"
	fi
}

# record appends "ACTION PATH" to the backup manifest, creating the
# backup directory on first use. PATH is as seen inside the root.
record() {
	[ "$dry" = 1 ] && return 0
	if [ -z "$backup" ]; then
		backup=$backups/bootstrap-$(date -u +%Y%m%dT%H%M%SZ)-$$
		install -d -m 0700 "$backup/files"
		say "backups of what this run replaces: $backup"
	fi
	echo "$1 $2" >>"$backup/MANIFEST"
}

# save PATH backs up an existing file before it is replaced or removed.
save() {
	local rel=${1#"$root"}
	[ "$dry" = 1 ] && return 0
	record replaced "$rel"
	install -d -m 0700 "$backup/files$(dirname "$rel")"
	cp -a "$1" "$backup/files$rel"
}

# put SRC DST MODE installs one file unless DST already has that content
# and mode.
put() {
	local srcf=$1 dst=$2 mode=$3
	if [ -f "$dst" ] && cmp -s "$srcf" "$dst" && [ "$(stat -c %a "$dst")" = "${mode#0}" ]; then
		return 0
	fi
	if [ -e "$dst" ]; then
		say "replace ${dst#"$root"}"
		save "$dst"
	else
		say "create ${dst#"$root"}"
		record created "${dst#"$root"}"
	fi
	do_ install -D -m "$mode" "$srcf" "$dst"
}

# mkdir_ DIR MODE creates a directory (recorded) when missing.
mkdir_() {
	[ -d "$1" ] && return 0
	say "create ${1#"$root"}/"
	record created-dir "${1#"$root"}"
	do_ install -d -m "$2" "$1"
}

systemctl_() {
	if [ -n "$root" ]; then
		do_ systemctl --root="$root" "$@"
	elif [ -d /run/systemd/system ]; then
		do_ systemctl "$@"
	else
		# systemd is not running (a container, an image build): edit the
		# unit links offline.
		do_ systemctl --root=/ "$@"
	fi
}

# ---- rollback ---------------------------------------------------------
if [ "$rollback" = 1 ]; then
	if [ -z "$rollback_dir" ]; then
		rollback_dir=$(ls -1d "$backups"/bootstrap-* 2>/dev/null | sort | tail -n1 || true)
		[ -n "$rollback_dir" ] || die "no backup under ${backups#"$root"} to roll back to"
	fi
	[ -f "$rollback_dir/MANIFEST" ] || die "$rollback_dir/MANIFEST: not a bootstrap backup"
	say "rolling back with $rollback_dir"
	# Newest action first.
	tac "$rollback_dir/MANIFEST" | while read -r action path; do
		case "$action" in
		enabled) say "disable $path"; systemctl_ disable "$path" ;;
		replaced) say "restore $path"; do_ cp -a "$rollback_dir/files$path" "$root$path" ;;
		created) say "remove $path"; do_ rm -f "$root$path" ;;
		created-dir) say "remove $path/ if empty"; do_ rmdir --ignore-fail-on-non-empty "$root$path" ;;
		created-user) say "remove user $path"; do_ userdel "$path" ;;
		created-group) say "remove group $path"; do_ groupdel "$path" ;;
		*) die "$rollback_dir/MANIFEST: unknown action $action" ;;
		esac
	done
	if [ -z "$root" ] && [ -d /run/systemd/system ]; then do_ systemctl daemon-reload; fi
	[ "$dry" = 1 ] || mv "$rollback_dir" "$rollback_dir.rolled-back"
	say "rollback done"
	exit 0
fi

# ---- 1. preflight -------------------------------------------------------
say "1/7 preflight"
[ "$(uname -s)" = Linux ] || die "Palisade needs Linux (this is $(uname -s))"
[ "$(id -u)" = 0 ] || die "run as root: the probe creates a sandbox and the install writes system paths"
for t in install cmp stat tac systemctl; do
	command -v "$t" >/dev/null || die "$t not found on PATH"
done
if [ -z "$bin_dir" ]; then
	command -v make >/dev/null || die "make not found (or use --bin-dir with prebuilt binaries)"
	command -v go >/dev/null || die "go not found (or use --bin-dir with prebuilt binaries)"
	say "build (make build)"
	do_ make -C "$src" build
	bin_dir=$src/bin
fi
binaries=()
for d in "$src"/cmd/*/; do binaries+=("$(basename "$d")"); done
if [ "$dry" = 0 ]; then
	for b in "${binaries[@]}"; do
		[ -x "$bin_dir/$b" ] || die "$bin_dir/$b: missing (build with make build)"
	done
	if ! "$bin_dir/sandbox-supervisor" preflight; then
		if [ "$fail_closed" = 1 ]; then
			die "kernel features missing (sandbox-supervisor preflight above); --fail-closed refuses"
		fi
		say "WARNING: kernel features missing (above); sandboxes will refuse to start where they are required"
	fi
else
	echo "  would run: $bin_dir/sandbox-supervisor preflight"
fi

# ---- 2. binaries (make install) ------------------------------------------
say "2/7 install binaries into ${bindir#"$root"}"
for b in "${binaries[@]}"; do
	put "$bin_dir/$b" "$bindir/$b" 0755
done
for d in "$src"/docs/*.md; do
	put "$d" "$root$prefix/share/doc/palisade/$(basename "$d")" 0644
done

# ---- 3. the sandbox user and group ----------------------------------------
say "3/7 sandbox user and group (10001)"
if [ -n "$root" ]; then
	# Inside a root: edit its files (no chroot tools needed).
	for f in passwd group; do
		[ -e "$root/etc/$f" ] || { record created "/etc/$f"; [ "$dry" = 1 ] || { install -d "$root/etc"; : >"$root/etc/$f"; }; }
	done
	if ! grep -q '^sandbox:' "$root/etc/group" 2>/dev/null; then
		grep -q '^[^:]*:[^:]*:10001:' "$root/etc/group" 2>/dev/null && die "gid 10001 is taken in ${root}/etc/group"
		say "add group sandbox (10001)"
		if [ "$dry" = 0 ]; then save "$root/etc/group"; echo 'sandbox:x:10001:' >>"$root/etc/group"; fi
	fi
	if ! grep -q '^sandbox:' "$root/etc/passwd" 2>/dev/null; then
		grep -q '^[^:]*:[^:]*:10001:' "$root/etc/passwd" 2>/dev/null && die "uid 10001 is taken in ${root}/etc/passwd"
		say "add user sandbox (10001)"
		if [ "$dry" = 0 ]; then save "$root/etc/passwd"; echo 'sandbox:x:10001:10001:Palisade sandbox:/nonexistent:/usr/sbin/nologin' >>"$root/etc/passwd"; fi
	fi
else
	if ! getent group sandbox >/dev/null; then
		getent group 10001 >/dev/null && die "gid 10001 is taken by group $(getent group 10001 | cut -d: -f1)"
		say "add group sandbox (10001)"
		do_ groupadd --system --gid 10001 sandbox
		record created-group sandbox
	fi
	if ! getent passwd sandbox >/dev/null; then
		getent passwd 10001 >/dev/null && die "uid 10001 is taken by user $(getent passwd 10001 | cut -d: -f1)"
		say "add user sandbox (10001)"
		do_ useradd --system --uid 10001 --gid sandbox --no-create-home --home-dir /nonexistent \
			--shell /usr/sbin/nologin --comment "Palisade sandbox" sandbox
		record created-user sandbox
	fi
fi

# ---- 4. /etc/palisade/palisade.env ---------------------------------------
say "4/7 ${envfile#"$root"}"
mkdir_ "$etcdir" 0700
mkdir_ "$home/.mac" 0700
mkdir_ "$root/var/log/palisade" 0700
tmpenv=$(mktemp)
trap 'rm -f "$tmpenv"' EXIT
if [ -f "$envfile" ]; then
	cat "$envfile" >"$tmpenv"
else
	cat >"$tmpenv" <<'EOF'
# Palisade worker settings, read by every unit (EnvironmentFile=).
# Root-owned, mode 0600. Written by deploy/bootstrap.sh; your edits are
# kept on the next run (only the keys bootstrap owns are reset).
#
# The hub (ocsf-collector.service and policy-sync.service need both):
#MAC_HUB_URL=https://hub.example.internal:8080
#MAC_AGENT_ID=worker-1
# Explicit policy (else ~/.mac/openshell-policy.yaml, else the bundled
# fail-closed default):
#MAC_OPENSHELL_POLICY=/etc/mac/openshell-policy.yaml
EOF
fi
# setkey K V: set K=V, replacing an existing K= line.
setkey() {
	if grep -q "^$1=" "$tmpenv"; then
		sed -i "s|^$1=.*|$1=$2|" "$tmpenv"
	else
		echo "$1=$2" >>"$tmpenv"
	fi
}
# Keys bootstrap owns: gc on (seed 000: "set to 1 by bootstrap"), the
# events file, and under --fail-closed every missing feature aborts.
setkey MAC_OPENSHELL_GC 1
grep -q '^MAC_OPENSHELL_EVENTS_FILE=' "$tmpenv" || setkey MAC_OPENSHELL_EVENTS_FILE /var/log/palisade/events.jsonl
if [ "$fail_closed" = 1 ]; then setkey MAC_OPENSHELL_REQUIRED 1; fi
put "$tmpenv" "$envfile" 0600

# envget K: the value of K in the env file as written.
envget() { sed -n "s/^$1=//p" "$tmpenv" | tail -n1; }

# ---- 5. units ----------------------------------------------------------
say "5/7 systemd units into ${unitdir#"$root"}"
# palisade-agent@.service is now an alias of sandbox-supervisor@.service.
old=$unitdir/palisade-agent@.service
if [ -f "$old" ] && [ ! -L "$old" ]; then
	say "retire ${old#"$root"} (now an alias of sandbox-supervisor@.service)"
	save "$old"
	do_ rm -f "$old"
fi
for u in "$src"/deploy/systemd/*; do
	put "$u" "$unitdir/$(basename "$u")" 0644
done
if [ -z "$root" ] && [ -d /run/systemd/system ]; then do_ systemctl daemon-reload; fi

# ---- 6. the confinement probe ----------------------------------------------
say "6/7 confinement-probe (log ${probelog#"$root"})"
probe_env=(env -i "PATH=/usr/sbin:/usr/bin:/sbin:/bin" "HOME=$home")
pol=$(envget MAC_OPENSHELL_POLICY)
if [ -n "$pol" ]; then probe_env+=("MAC_OPENSHELL_POLICY=$root$pol"); fi
if [ "$(envget MAC_OPENSHELL_REQUIRED)" != "" ]; then probe_env+=("MAC_OPENSHELL_REQUIRED=$(envget MAC_OPENSHELL_REQUIRED)"); fi
if [ "$dry" = 1 ]; then
	echo "  would run: ${probe_env[*]} $bindir/confinement-probe --log $probelog"
else
	probe_ok=1
	"${probe_env[@]}" "$bindir/confinement-probe" --log "$probelog" >/dev/null || probe_ok=0
	last=$(tail -n1 "$probelog" 2>/dev/null || true)
	if [ "$probe_ok" != 1 ] || [ "$last" != CONFINEMENT_PROBE_OK ]; then
		grep '"ok":false' "$probelog" | tail -n 60 >&2 || true
		die "the confinement probe did not prove the sandbox (${probelog#"$root"} ends with '$last'); nothing enabled"
	fi
	say "CONFINEMENT_PROBE_OK"
fi

# ---- 7. enable -----------------------------------------------------------
units=(confinement-probe.service sandbox-supervisor-gc.timer)
if [ -n "$(envget MAC_HUB_URL)" ] && [ -n "$(envget MAC_AGENT_ID)" ]; then
	units+=(ocsf-collector.service policy-sync.service)
else
	say "MAC_HUB_URL/MAC_AGENT_ID not set in ${envfile#"$root"}: ocsf-collector and policy-sync stay disabled"
fi
if [ "$enable" = 1 ]; then
	say "7/7 enable ${units[*]}"
	for u in "${units[@]}"; do
		if [ "$dry" = 0 ] && systemctl_ is-enabled --quiet "$u" 2>/dev/null; then
			continue
		fi
		systemctl_ enable "$u"
		record enabled "$u"
	done
	say "agents: put MAC_AGENT_COMMAND and MAC_AGENT_WORKDIR in /etc/palisade/agent-ID.env, then systemctl enable --now sandbox-supervisor@ID"
else
	say "7/7 not enabling (no --enable): ${units[*]}"
fi
say "done"
