package ocsftest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// testutil.RequireData is the gate RequireSchema uses; test both modes.
func TestRequireData(t *testing.T) {
	missing := errors.New("not found")

	t.Setenv(testutil.RequirePrivilegedEnv, "")
	f := &fakeTB{TB: t}
	f.run(func() { testutil.RequireData(f, "the thing", missing) })
	if !strings.Contains(f.skipped, "the thing") || f.fatal != "" {
		t.Fatalf("non-strict: skipped %q fatal %q", f.skipped, f.fatal)
	}

	t.Setenv(testutil.RequirePrivilegedEnv, "1")
	f = &fakeTB{TB: t}
	f.run(func() { testutil.RequireData(f, "the thing", missing) })
	if !strings.Contains(f.fatal, "not found") || f.skipped != "" {
		t.Fatalf("strict: skipped %q fatal %q", f.skipped, f.fatal)
	}

	f = &fakeTB{TB: t}
	f.run(func() { testutil.RequireData(f, "the thing", nil) })
	if f.fatal != "" || f.skipped != "" {
		t.Fatal("RequireData acted on a nil error")
	}
}
