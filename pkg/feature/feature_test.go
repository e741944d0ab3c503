package feature

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckCachesAndWraps(t *testing.T) {
	calls := 0
	p := &Probe{Name: "test:always-missing", MinKernel: "9.9", Check: func() error {
		calls++
		return errors.New("not here")
	}}
	Register(p)
	for i := 0; i < 3; i++ {
		err := Check("test:always-missing")
		var m *MissingError
		if !errors.As(err, &m) {
			t.Fatalf("Check returned %T %v, want *MissingError", err, err)
		}
		if !strings.Contains(err.Error(), "9.9") || !strings.Contains(err.Error(), "test:always-missing") {
			t.Fatalf("error %q does not name the feature and kernel", err)
		}
	}
	if calls != 1 {
		t.Fatalf("probe ran %d times, want 1", calls)
	}
	if err := Check("no-such-feature"); err == nil {
		t.Fatal("unknown feature name accepted")
	}
}

func TestRegisterDuplicatePanics(t *testing.T) {
	Register(&Probe{Name: "test:dup", Check: func() error { return nil }})
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate Register did not panic")
		}
	}()
	Register(&Probe{Name: "test:dup", Check: func() error { return nil }})
}
