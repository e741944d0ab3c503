package l7

import (
	"errors"
	"testing"
)

func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		name    string
		allowed bool
		status  int
		want    Decision
	}{
		{"allowed", true, 0, Decision{Allow: true}},
		{"denied", false, 403, Decision{Reason: "r", Rule: "deny_rules[1]"}},
		{"invalid", false, 413, Decision{Reason: "r", Status: 413, Detail: "d"}},
	} {
		if got := Verdict(c.allowed, c.status, "r", "deny_rules[1]", "d"); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestAsKind(t *testing.T) {
	kind := errors.New("kind")
	if AsKind(kind, nil) != nil {
		t.Error("nil became an error")
	}
	inner := errors.New("inner")
	if err := AsKind(kind, inner); !errors.Is(err, kind) || err.Error() != "kind: inner" {
		t.Errorf("AsKind: %v", err)
	}
	already := AsKind(kind, inner)
	if AsKind(kind, already) != already {
		t.Error("an error of the kind was wrapped again")
	}
}
