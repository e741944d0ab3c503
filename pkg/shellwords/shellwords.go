// Package shellwords splits and quotes command-line strings the way a POSIX
// shell does, for environment knobs such as MAC_OPENSHELL_CREATE_ARGS that
// the seeds define as "shell-split".
//
// Split implements the quoting rules of POSIX sh (XCU 2.2 and 2.6.7):
// unquoted blanks (space, tab) separate words; a backslash outside quotes
// preserves the next character and a backslash-newline disappears; single
// quotes preserve everything up to the next single quote; inside double
// quotes a backslash escapes only $ ` " \ and newline. An unterminated quote or a trailing
// backslash is an error.
//
// Anything whose meaning in sh depends on more than quoting is refused
// rather than guessed, because a split that differs from the shell's could
// select a different image or upload a different path: parameter, command
// and arithmetic expansion ($, backquote, also inside double quotes),
// operators (; & | < > ( ) and an unquoted newline), comments (# at the
// start of a word), pathname expansion (* ? [) and tilde expansion (~ at the
// start of a word). Quote such characters to pass them literally.
//
// Quote and Join do the inverse: Split(Join(words)) returns words.
package shellwords

import (
	"fmt"
	"strings"
)

// SyntaxError describes why a string cannot be split. Offset is the byte
// offset in the input where the problem was found.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("shell syntax at byte %d: %s", e.Offset, e.Msg)
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// Split splits s into words like a POSIX shell would, or returns a
// *SyntaxError for unterminated quotes and for constructs that would make
// the shell expand or redirect instead of passing a literal word.
func Split(s string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool // a word has started (possibly empty, e.g. '')
	)
	end := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isBlank(c):
			end()
		case c == '\\':
			if i+1 >= len(s) {
				return nil, &SyntaxError{i, "trailing backslash escapes nothing"}
			}
			i++
			if s[i] == '\n' { // line continuation: removed
				continue
			}
			inWord = true
			cur.WriteByte(s[i])
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, &SyntaxError{i, "unterminated single quote"}
			}
			inWord = true
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inWord = true
			start := i
			closed := false
			for i++; i < len(s); i++ {
				d := s[i]
				if d == '"' {
					closed = true
					break
				}
				switch d {
				case '\\':
					if i+1 < len(s) {
						switch n := s[i+1]; n {
						case '$', '`', '"', '\\':
							cur.WriteByte(n)
							i++
							continue
						case '\n':
							i++
							continue
						}
					}
					cur.WriteByte('\\')
				case '$', '`':
					return nil, &SyntaxError{i, fmt.Sprintf("%q inside double quotes would expand; escape it with a backslash or use single quotes", d)}
				default:
					cur.WriteByte(d)
				}
			}
			if !closed {
				return nil, &SyntaxError{start, "unterminated double quote"}
			}
		case c == '\n':
			return nil, &SyntaxError{i, "unquoted newline would end the command; use a space"}
		case c == '$' || c == '`':
			return nil, &SyntaxError{i, fmt.Sprintf("unquoted %q would expand; quote it", c)}
		case strings.IndexByte(";&|<>()", c) >= 0:
			return nil, &SyntaxError{i, fmt.Sprintf("unquoted shell operator %q; quote it", c)}
		case strings.IndexByte("*?[", c) >= 0:
			return nil, &SyntaxError{i, fmt.Sprintf("unquoted %q would be a pathname pattern; quote it", c)}
		case (c == '#' || c == '~') && !inWord:
			what := "a comment"
			if c == '~' {
				what = "tilde expansion"
			}
			return nil, &SyntaxError{i, fmt.Sprintf("unquoted %q at the start of a word would be %s; quote it", c, what)}
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	end()
	return words, nil
}

// safeUnquoted are the bytes that never need quoting in any position.
func safeUnquoted(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("@%+=:,./-_", c) >= 0
}

// Quote returns w quoted for a POSIX shell: unchanged when it consists only
// of characters that need no quoting, otherwise in single quotes with each
// embedded single quote written as quote, backslash, quote, quote (close,
// escape, reopen). The empty word becomes two single quotes.
func Quote(w string) string {
	if w == "" {
		return "''"
	}
	plain := true
	for i := 0; i < len(w); i++ {
		if !safeUnquoted(w[i]) {
			plain = false
			break
		}
	}
	if plain {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// Join quotes each word and joins them with single spaces.
func Join(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = Quote(w)
	}
	return strings.Join(q, " ")
}
