package l7

import (
	"net/url"
	"strings"
)

// QueryAlternates lists the other ways servers read a query's
// parameter names (nil when there are none). Names are read differently when they carry a space
// (a "+" or "%20"), a "." or an unmatched "[": PHP turns each into "_"
// and drops leading spaces ("debug." and "debug+" are "debug_" to it),
// and servers that trim names drop trailing spaces and dots ("debug "
// is "debug"). Values under names that become one are merged. Names
// differing in case or as "a[]" for "a" are left to the matcher (deny
// rules read them all).
func QueryAlternates(q url.Values) []url.Values {
	special := false
	for name := range q {
		if strings.ContainsAny(name, " .[+") {
			special = true
			break
		}
	}
	if !special {
		return nil
	}
	var out []url.Values
	for _, fold := range []func(string) string{phpName, trimmedName} {
		r := make(url.Values, len(q))
		for name, vv := range q {
			f := fold(name)
			r[f] = append(r[f], vv...)
		}
		out = append(out, r)
	}
	return out
}

// phpName is a parameter name as PHP registers it: leading spaces
// dropped, spaces and dots as "_", a "[" with no "]" after it as "_"
// (a "[" with one starts array syntax, kept as sent).
func phpName(name string) string {
	name = strings.TrimLeft(name, " ")
	b := []byte(name)
	for i, c := range b {
		switch c {
		case ' ', '.':
			b[i] = '_'
		case '[':
			if strings.IndexByte(name[i:], ']') > 0 {
				return string(b)
			}
			b[i] = '_'
		}
	}
	return string(b)
}

// trimmedName is a parameter name with surrounding spaces and trailing
// dots and pluses dropped.
func trimmedName(name string) string {
	return strings.TrimRight(strings.TrimLeft(name, " "), " .+")
}
