package cgroup

import (
	"math"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, n := range []string{"a", "sbx-0123456789ab", "x.y_z", "...a", strings.Repeat("n", 255)} {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	for _, n := range []string{"", ".", "..", "...", "a/b", "/abs", "a b", "a\nb", "a\x00", "tab\t", strings.Repeat("n", 256)} {
		if err := ValidateName(n); err == nil {
			t.Errorf("ValidateName(%q) accepted", n)
		}
	}
}

func TestLimitsNormalize(t *testing.T) {
	l, err := Limits{}.normalize()
	if err != nil || l.Pids != DefaultPids || l.MemoryBytes != 0 || l.CPUs != 0 {
		t.Fatalf("zero limits normalize to %+v, %v; want pids %d only", l, err, DefaultPids)
	}
	l, err = Limits{Pids: 20, MemoryBytes: 64 << 20, CPUs: 1.5}.normalize()
	if err != nil || l.Pids != 20 || l.cpuQuotaUS() != 150000 {
		t.Fatalf("normalize = %+v, %v (quota %d)", l, err, l.cpuQuotaUS())
	}
	bad := map[string]Limits{
		"Limits.Pids":        {Pids: -1},
		"Limits.MemoryBytes": {MemoryBytes: -5},
		"1 MiB":              {MemoryBytes: 4096},
		"Limits.CPUs":        {CPUs: -0.5},
		"0.01":               {CPUs: 0.001},
		"non-negative":       {CPUs: math.NaN()},
		"implausibly":        {CPUs: 1e12},
	}
	for want, lim := range bad {
		if _, err := lim.normalize(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: err %v, want one mentioning %q", lim, err, want)
		}
	}
	if _, err := (Limits{CPUs: math.Inf(1)}).normalize(); err == nil {
		t.Error("CPUs=+Inf accepted")
	}
}
