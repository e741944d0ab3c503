package attribution

import (
	"testing"
)

func TestParseNSpid(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"Name:\tcurl\nNSpid:\t4242\n", 4242, true},
		{"Name:\tcurl\nNSpid:\t4242\t17\nNSpgid:\t4242\t17\n", 17, true},
		{"NSpid:\t4242\t5\t9", 9, true},
		{"Name:\tcurl\n", 0, false},
		{"NSpid:\n", 0, false},
		{"NSpid:\t12\tx\n", 0, false},
		{"NSpid:\t0\n", 0, false},
	} {
		got, err := parseNSpid([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseNSpid(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
