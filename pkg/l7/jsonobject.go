package l7

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// ErrJSONShape wraps the errors of ReadJSONObject and ReadJSONString
// (other than a member callback's own): the body's JSON is not of the
// shape the inspector reads.
var ErrJSONShape = errors.New("JSON body of an unexpected shape")

// ReadJSONObject reads one JSON object from dec member by member, for
// the inspectors that decide JSON bodies (pkg/l7/jsonrpc,
// pkg/l7/graphql): member is called with each name while the decoder
// stands before its value, which member must consume. A name that
// spells one of known in another letter case ("Method", "paramſ") is
// refused: servers built on Go's encoding/json match member names
// case-insensitively and would read it as that one. With closed, any
// name not in known is refused too. Duplicate names, invalid UTF-8 and
// the rest of JSON's syntax are the decoder's to refuse.
func ReadJSONObject(dec *jsontext.Decoder, known []string, closed bool, member func(name string) error) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrJSONShape, err)
	}
	if tok.Kind() != '{' {
		return fmt.Errorf("%w: expected a JSON object, not %s", ErrJSONShape, tok.Kind())
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrJSONShape, err)
		}
		name := tok.String()
		exact := false
		for _, k := range known {
			if name == k {
				exact = true
			} else if strings.EqualFold(name, k) {
				return fmt.Errorf("%w: member %q spells %q in another letter case", ErrJSONShape, clipName(name), k)
			}
		}
		if closed && !exact {
			return fmt.Errorf("%w: unknown member %q", ErrJSONShape, clipName(name))
		}
		if err := member(name); err != nil {
			return err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return fmt.Errorf("%w: %v", ErrJSONShape, err)
	}
	return nil
}

// ReadJSONString reads a string value; what names it in the error.
func ReadJSONString(dec *jsontext.Decoder, what string) (string, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrJSONShape, err)
	}
	if tok.Kind() != '"' {
		return "", fmt.Errorf("%w: %s must be a string", ErrJSONShape, what)
	}
	return tok.String(), nil
}

// AsKind makes err wrap kind (an inspector's own sentinel, such as its
// ErrInvalid) unless it already does; nil stays nil. The inspectors
// pass ReadJSONObject's and ReadJSONString's errors through it.
func AsKind(kind, err error) error {
	if err == nil || errors.Is(err, kind) {
		return err
	}
	return fmt.Errorf("%w: %v", kind, err)
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
