// Package graphql decides the requests of protocol graphql endpoints by
// the operation they ask a GraphQL server to run: its type (query,
// mutation, subscription) and its name.
//
// A request is read in both forms of GraphQL over HTTP: GET with the
// document in the query string, and POST with a JSON envelope
// ({"query", "operationName", "variables", "extensions"}, or a JSON
// array of them: a batch) or an application/graphql body holding the
// document itself. Envelopes are read with
// github.com/go-json-experiment/json's jsontext decoder (duplicate
// member names, invalid UTF-8 and 10,000-deep nesting refused) and
// documents with github.com/vektah/gqlparser/v2's parser (the one
// gqlgen uses; no hand-written parser), bounded to MaxTokens tokens and
// gqlparser's MaxNestingDepth (1,000) levels, the body to the
// endpoint's graphql_max_body_bytes.
//
// A request a server could read as another operation than the one
// decided is refused rather than guessed at: a document of several
// operations without an operationName naming exactly one of them; an
// envelope member the reader does not know, or one spelt in another
// letter case (servers on encoding/json fold member names); GraphQL
// parameters both in the URL and in a POST body (express-graphql reads
// the URL's first); a hash that does not match the document beside it.
// A persisted query sent as a hash or id alone cannot be read at all:
// it is refused unless the endpoint registers it
// (persisted_queries: allow_registered, graphql_persisted_queries),
// and then decided as the operation the registry says it is.
package graphql

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/palisade-sandbox/palisade/pkg/l7"
)

// MaxTokens bounds the tokens of one document.
const MaxTokens = 20000

// Operation is what the decision reads of one requested operation.
type Operation struct {
	Type string // query, mutation or subscription ("" while a persisted query is unclassified)
	Name string // "" for an anonymous operation
	// Persisted is the hash or id of a request that sent no document
	// ("" when it sent one).
	Persisted string
}

// ErrInvalid wraps the reasons a request holds no operation the proxy
// can read; ErrAmbiguous those where it could be read as more than one.
var (
	ErrInvalid   = errors.New("not a GraphQL request the proxy can read")
	ErrAmbiguous = errors.New("GraphQL operation is ambiguous")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ParseDocument reads the operation a document runs: the only one, or
// the one operationName names (hasName; "" is refused: servers differ
// on whether it names nothing or an operation called ""). A document
// whose operations share a name, or mixes an anonymous operation with
// others, is refused: servers that do not validate it first would pick
// one.
func ParseDocument(doc, operationName string, hasName bool) (Operation, error) {
	if hasName && operationName == "" {
		return Operation{}, invalid("operationName is empty")
	}
	d, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: doc}, MaxTokens)
	if err != nil {
		return Operation{}, invalid("document does not parse: %s", firstLine(err.Error()))
	}
	if len(d.Operations) == 0 {
		return Operation{}, invalid("document has no operation")
	}
	seen := map[string]bool{}
	for _, op := range d.Operations {
		if op.Name == "" && len(d.Operations) > 1 {
			return Operation{}, fmt.Errorf("%w: an anonymous operation beside others", ErrAmbiguous)
		}
		if seen[op.Name] {
			return Operation{}, fmt.Errorf("%w: two operations named %q", ErrAmbiguous, op.Name)
		}
		seen[op.Name] = true
	}
	var sel *ast.OperationDefinition
	switch {
	case hasName:
		sel = d.Operations.ForName(operationName)
		if sel == nil || sel.Name != operationName {
			return Operation{}, invalid("operationName names no operation of the document")
		}
	case len(d.Operations) == 1:
		sel = d.Operations[0]
	default:
		return Operation{}, fmt.Errorf("%w: %d operations and no operationName", ErrAmbiguous, len(d.Operations))
	}
	switch sel.Operation {
	case ast.Query, ast.Mutation, ast.Subscription:
	default:
		return Operation{}, invalid("unknown operation type")
	}
	return Operation{Type: string(sel.Operation), Name: sel.Name}, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// envelopeMembers are the members of a JSON envelope; any other member
// is refused (an unknown one might be how a server names a document).
var envelopeMembers = []string{"query", "operationName", "variables", "extensions", "id", "documentId", "queryId", "doc_id"}

// persistedIDs are the members and URL parameters that name a saved
// document by id (Relay's doc_id, and the spellings servers use).
var persistedIDs = []string{"id", "documentId", "queryId", "doc_id"}

// envelope is one request's GraphQL parameters, from a JSON object or
// a URL query string.
type envelope struct {
	query, operationName string
	hasQuery, hasName    bool
	hash                 string // extensions.persistedQuery.sha256Hash
	id                   string // a persisted id member
}

// operation reads the operation an envelope asks for.
func (e *envelope) operation() (Operation, error) {
	if e.hasQuery && strings.TrimSpace(e.query) != "" {
		op, err := ParseDocument(e.query, e.operationName, e.hasName)
		if err != nil {
			return Operation{}, err
		}
		if e.hash != "" {
			sum := sha256.Sum256([]byte(e.query))
			if !strings.EqualFold(e.hash, hex.EncodeToString(sum[:])) {
				return Operation{}, invalid("persistedQuery.sha256Hash does not match the document")
			}
		}
		return op, nil
	}
	switch {
	case e.hash != "" && e.id != "":
		return Operation{}, invalid("both a persisted hash and a persisted id")
	case e.hash != "":
		return Operation{Persisted: e.hash}, nil
	case e.id != "":
		return Operation{Persisted: e.id}, nil
	}
	return Operation{}, invalid("no document and no persisted query")
}

// ParseJSON reads a POST body in GraphQL's JSON form: one envelope, or
// a nonempty array of them (batch).
func ParseJSON(body []byte) (ops []Operation, batch bool, err error) {
	if !utf8.Valid(body) {
		return nil, false, invalid("body is not UTF-8")
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	var envs []envelope
	switch dec.PeekKind() {
	case '[':
		batch = true
		dec.ReadToken()
		for dec.PeekKind() != ']' {
			if len(envs) == 1024 {
				return nil, true, invalid("more than 1024 operations in a batch")
			}
			e, err := readEnvelope(dec)
			if err != nil {
				return nil, true, err
			}
			envs = append(envs, e)
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, true, invalid("%v", err)
		}
		if len(envs) == 0 {
			return nil, true, invalid("empty batch")
		}
	case '{':
		e, err := readEnvelope(dec)
		if err != nil {
			return nil, false, err
		}
		envs = []envelope{e}
	default:
		return nil, false, invalid("body is neither a JSON object nor an array")
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, batch, invalid("data after the request")
	}
	for i := range envs {
		op, err := envs[i].operation()
		if err != nil {
			return nil, batch, err
		}
		ops = append(ops, op)
	}
	return ops, batch, nil
}

// readEnvelope reads one JSON envelope object.
func readEnvelope(dec *jsontext.Decoder) (envelope, error) {
	var e envelope
	err := readObject(dec, envelopeMembers, true, func(name string) error {
		kind := dec.PeekKind()
		switch {
		case name == "query" || name == "operationName":
			if kind == 'n' {
				return skip(dec)
			}
			s, err := readString(dec, name)
			if name == "query" {
				e.query, e.hasQuery = s, true
			} else {
				e.operationName, e.hasName = s, true
			}
			return err
		case name == "extensions":
			if kind == 'n' {
				return skip(dec)
			}
			h, err := readExtensions(dec)
			e.hash = h
			return err
		case name == "variables":
			if kind != 'n' && kind != '{' {
				return invalid("variables must be an object")
			}
			return skip(dec)
		}
		// A persisted id: a string (or a number some servers accept).
		if kind == 'n' {
			return skip(dec)
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return invalid("%v", err)
		}
		if tok.Kind() != '"' && tok.Kind() != '0' {
			return invalid("%s must be a string", name)
		}
		if e.id != "" {
			return invalid("more than one persisted id")
		}
		e.id = tok.String()
		if e.id == "" {
			return invalid("%s is empty", name)
		}
		return nil
	})
	return e, err
}

// readExtensions reads an extensions object and returns its
// persistedQuery.sha256Hash ("" when none).
func readExtensions(dec *jsontext.Decoder) (string, error) {
	hash := ""
	err := readObject(dec, []string{"persistedQuery"}, false, func(name string) error {
		if name != "persistedQuery" {
			return skip(dec)
		}
		if dec.PeekKind() == 'n' {
			return skip(dec)
		}
		return readObject(dec, []string{"sha256Hash"}, false, func(name string) error {
			if name != "sha256Hash" {
				return skip(dec)
			}
			s, err := readString(dec, "persistedQuery.sha256Hash")
			if err == nil && s == "" {
				err = invalid("persistedQuery.sha256Hash is empty")
			}
			hash = s
			return err
		})
	})
	return hash, err
}

// readObject is l7.ReadJSONObject with its errors wrapping ErrInvalid.
func readObject(dec *jsontext.Decoder, known []string, closed bool, member func(name string) error) error {
	return asInvalid(l7.ReadJSONObject(dec, known, closed, member))
}

func skip(dec *jsontext.Decoder) error {
	if err := dec.SkipValue(); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func readString(dec *jsontext.Decoder, name string) (string, error) {
	v, err := l7.ReadJSONString(dec, name)
	return v, asInvalid(err)
}

// asInvalid makes err (from package l7's JSON readers) wrap ErrInvalid.
func asInvalid(err error) error { return l7.AsKind(ErrInvalid, err) }

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// ParseExtensions reads a GET's extensions parameter (JSON) and returns
// its persistedQuery.sha256Hash ("" when none).
func ParseExtensions(b []byte) (string, error) {
	if !utf8.Valid(b) {
		return "", invalid("extensions is not UTF-8")
	}
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	hash := ""
	if dec.PeekKind() == 'n' {
		dec.ReadToken()
	} else {
		h, err := readExtensions(dec)
		if err != nil {
			return "", err
		}
		hash = h
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return "", invalid("extensions is not one JSON object")
	}
	return hash, nil
}
