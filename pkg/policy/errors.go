package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// FieldError is one validation problem: the dotted field path
// (network_policies.github.endpoints[0].port), the 1-based YAML line it was
// found on (0 when unknown) and what is wrong with it.
type FieldError struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty"`
	Msg  string `json:"message"`
}

func (e *FieldError) Error() string {
	path := e.Path
	if path == "" {
		path = "policy"
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", path, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", path, e.Msg)
}

// Errors is every problem found in one policy. It is returned (possibly
// wrapped) by Parse, LoadFile, Resolve and Render; use AsErrors to get it
// back from a wrapped error.
type Errors []*FieldError

func (e Errors) Error() string {
	switch len(e) {
	case 0:
		return "no policy errors"
	case 1:
		return "invalid policy: " + e[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid policy: %d problems:", len(e))
	for _, fe := range e {
		b.WriteString("\n  ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// List returns the problems, in document order.
func (e Errors) List() []*FieldError { return []*FieldError(e) }

// Strings returns one line per problem ("path (line N): message").
func (e Errors) Strings() []string {
	out := make([]string, len(e))
	for i, fe := range e {
		out[i] = fe.Error()
	}
	return out
}

// Has reports whether some problem is at exactly path.
func (e Errors) Has(path string) bool {
	for _, fe := range e {
		if fe.Path == path {
			return true
		}
	}
	return false
}

// AsErrors extracts the Errors carried by err, if any.
func AsErrors(err error) (Errors, bool) {
	var e Errors
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// sortErrors orders problems by line, then path, keeping discovery order
// for ties, so output follows the document.
func sortErrors(e Errors) {
	slices.SortStableFunc(e, func(a, b *FieldError) int {
		la, lb := a.Line, b.Line
		if la == 0 {
			la = 1 << 30
		}
		if lb == 0 {
			lb = 1 << 30
		}
		return cmp.Compare(la, lb)
	})
}
