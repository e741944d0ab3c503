package ceiling

import (
	"path"
	"strings"
	"unicode/utf8"
)

// The inclusion routines below decide L(a) ⊆ L(b) for the pattern
// languages the policy uses, soundly: true only when every string a
// matches, b matches too. They compare the patterns symbolically: each
// wildcard of a stands for a string nobody knows, so only a wildcard of b
// at least as wide can absorb it ("*" absorbs anything, "?" one
// character or one "?"), and a literal of a must meet the same literal,
// a "?" or a "*" of b. Whatever instantiation a's wildcards then take, b's
// wildcards can take the same text, so b matches. The converse can fail
// (b = "a*" ∪ "[^a]*" written as one pattern is not a pattern), so a false
// answer means "not proved", never "proved not contained".

// maxGlob bounds the patterns compared by the quadratic dynamic
// programmes (policy limits strings to 4096 characters; 4096² cells is
// 16M steps, still fast, but a bound keeps a hostile ceiling cheap).
const maxGlob = 4096

// urlGlobWithin reports whether every path the URL path glob a matches
// (pkg/policy's rule syntax: "*" and "**" any run of bytes including "/",
// "?" one byte; "*" or "**" alone everything) is matched by b.
//
// Every path a rule is matched against starts with "/" (the readings
// pkg/l7 decides a request under all do), so a universal a is compared
// as "/*".
func urlGlobWithin(a, b string) bool {
	a, b = collapseStars(a), collapseStars(b)
	if b == "*" {
		return true
	}
	if a == "*" {
		a = "/*"
	}
	return starGlobWithin(a, b, true)
}

func collapseStars(g string) string {
	for strings.Contains(g, "**") {
		g = strings.ReplaceAll(g, "**", "*")
	}
	return g
}

// labelGlobWithin is urlGlobWithin for the first label of an intra-label
// host pattern ("*" any run of label characters; no "?").
func labelGlobWithin(a, b string) bool {
	return starGlobWithin(collapseStars(a), collapseStars(b), false)
}

// starGlobWithin is the byte-level symbolic inclusion for globs whose
// only wildcards are '*' and, when question is set, '?'.
func starGlobWithin(a, b string, question bool) bool {
	if len(a) > maxGlob || len(b) > maxGlob {
		return a == b
	}
	// row[j] = a[i:] is absorbed by b[j:], computed from i = len(a) down.
	next := make([]bool, len(b)+1)
	cur := make([]bool, len(b)+1)
	for i := len(a); i >= 0; i-- {
		for j := len(b); j >= 0; j-- {
			switch {
			case j == len(b):
				cur[j] = i == len(a)
			case b[j] == '*':
				cur[j] = cur[j+1] || (i < len(a) && next[j])
			case i == len(a):
				cur[j] = false
			case question && b[j] == '?':
				cur[j] = a[i] != '*' && next[j+1]
			case a[i] == '*' || question && a[i] == '?':
				cur[j] = false
			default:
				cur[j] = a[i] == b[j] && next[j+1]
			}
		}
		cur, next = next, cur
	}
	return next[0]
}

// binaryWithin reports whether every executable path the binary pattern
// a matches (policy.MatchBinary: path.Match globs per component, "**" any
// number of components) is matched by b. Both are validated, cleaned
// binaries[].path values.
func binaryWithin(a, b string) bool {
	if a == b {
		return true
	}
	ac, bc := splitComponents(a), splitComponents(b)
	if len(ac) > maxGlob || len(bc) > maxGlob {
		return false
	}
	next := make([]bool, len(bc)+1)
	cur := make([]bool, len(bc)+1)
	for i := len(ac); i >= 0; i-- {
		for j := len(bc); j >= 0; j-- {
			switch {
			case j == len(bc):
				cur[j] = i == len(ac)
			case bc[j] == "**":
				cur[j] = cur[j+1] || (i < len(ac) && next[j])
			case i == len(ac) || ac[i] == "**":
				cur[j] = false
			default:
				cur[j] = componentWithin(ac[i], bc[j]) && next[j+1]
			}
		}
		cur, next = next, cur
	}
	return next[0]
}

func splitComponents(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// globToken is one element of a path.Match pattern: a literal character
// (its bytes: one rune, or one byte of invalid UTF-8), '*', '?', or a
// character class (its text, brackets included).
type globToken struct {
	kind byte // 'l' literal, '*', '?', '['
	text string
}

// tokenizeComponent splits a path.Match component pattern. ok is false for
// a pattern path.Match would reject or that uses escapes (binaries never
// do: the loader refuses '\').
func tokenizeComponent(p string) ([]globToken, bool) {
	if _, err := path.Match(p, ""); err != nil || strings.ContainsRune(p, '\\') {
		return nil, false
	}
	var out []globToken
	for i := 0; i < len(p); {
		switch p[i] {
		case '*':
			out = append(out, globToken{kind: '*'})
			i++
		case '?':
			out = append(out, globToken{kind: '?'})
			i++
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '^' {
				j++
			}
			// path.Match reads at least one range before a closing ']'.
			if j < len(p) && p[j] == ']' {
				return nil, false
			}
			end := strings.IndexByte(p[j:], ']')
			if end < 0 {
				return nil, false
			}
			out = append(out, globToken{kind: '[', text: p[i : j+end+1]})
			i = j + end + 1
		default:
			_, n := utf8.DecodeRuneInString(p[i:])
			out = append(out, globToken{kind: 'l', text: p[i : i+n]})
			i += n
		}
	}
	return out, true
}

// componentWithin is the symbolic inclusion for one path component.
func componentWithin(a, b string) bool {
	if a == b {
		return true
	}
	at, okA := tokenizeComponent(a)
	bt, okB := tokenizeComponent(b)
	if !okA || !okB || len(at) > maxGlob || len(bt) > maxGlob {
		return false
	}
	next := make([]bool, len(bt)+1)
	cur := make([]bool, len(bt)+1)
	for i := len(at); i >= 0; i-- {
		for j := len(bt); j >= 0; j-- {
			switch {
			case j == len(bt):
				cur[j] = i == len(at)
			case bt[j].kind == '*':
				cur[j] = cur[j+1] || (i < len(at) && next[j])
			case i == len(at) || at[i].kind == '*':
				cur[j] = false
			default:
				cur[j] = tokenWithin(at[i], bt[j]) && next[j+1]
			}
		}
		cur, next = next, cur
	}
	return next[0]
}

// tokenWithin reports whether the one character a's token stands for is
// always one b's token matches (b is not '*').
func tokenWithin(a, b globToken) bool {
	switch b.kind {
	case '?':
		return true // a is a literal, '?' or a class: one character
	case 'l':
		return a.kind == 'l' && a.text == b.text
	case '[':
		switch a.kind {
		case 'l':
			m, err := path.Match(b.text, a.text)
			return err == nil && m
		case '[':
			return a.text == b.text
		}
	}
	return false
}
