//go:build linux

package landlockaudit

import "testing"

// What a sandbox's start and teardown pay for denial events: the audit
// lease (AUDIT_GET, the host lock, the holders file, AUDIT_SET when it
// enables), and the watcher's subscription and final drain.
//
//	go test -run '^$' -bench 'Lease|Watch' ./pkg/landlockaudit
func BenchmarkLease(b *testing.B) {
	requireAuditB(b)
	for b.Loop() {
		l := Acquire()
		if l.Mode == ModeUnavailable {
			b.Fatal(l.Detail)
		}
		l.Release()
	}
}

func BenchmarkWatchStop(b *testing.B) {
	requireAuditB(b)
	for b.Loop() {
		w, err := Watch(Config{Owns: func(int) bool { return false }, Emit: func(Denial) {}})
		if err != nil {
			b.Fatal(err)
		}
		w.Stop()
	}
}

func requireAuditB(b *testing.B) {
	b.Helper()
	if _, err := GetStatus(); err != nil {
		b.Skip("audit netlink unavailable: ", err)
	}
}
