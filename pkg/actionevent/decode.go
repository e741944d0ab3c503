package actionevent

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"time"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// JSON decoding, with github.com/go-json-experiment/json (the encoding/json
// v2 proposal) into the tagged structs of ocsf.go and actionevent.go.
//
// Semantics: the input must be exactly one JSON value (a truncated or
// otherwise malformed line is refused, as encoding/json refuses it);
// member names match exactly (no case folding); the last of duplicate
// names wins; invalid UTF-8 in strings becomes U+FFFD; null leaves a field
// at its zero value; integers with a fraction or an exponent, and values of
// the wrong JSON kind, are errors naming the attribute. Attributes the
// mapping does not read are checked and skipped, never copied.

// ocsfOptions decode an OCSF line: unknown attributes are ignored.
var ocsfOptions = json.JoinOptions(
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
)

// recordOptions decode a mac.action_event.v1 record strictly: an unknown
// field is an error, and so is null for a nested object.
var recordOptions = json.JoinOptions(
	ocsfOptions,
	json.RejectUnknownMembers(true),
	json.WithUnmarshalers(json.JoinUnmarshalers(
		json.UnmarshalFromFunc(unmarshalTime),
		objectNotNull[Actor](),
		objectNotNull[Target](),
		objectNotNull[Policy](),
		objectNotNull[Source](),
	)),
)

var (
	errNull = errors.New("want object, have JSON null")
	errTime = errors.New("not an RFC 3339 time")
)

// unmarshalTime reads a record's time: an RFC 3339 string, or "" or null
// for the zero time.
func unmarshalTime(dec *jsontext.Decoder, t *time.Time) error {
	if k := dec.PeekKind(); k != '"' && k != 'n' {
		if err := dec.SkipValue(); err != nil {
			return err
		}
		return errors.New("want string, have JSON " + kindName(k))
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	*t = time.Time{}
	if s := tok.String(); tok.Kind() == '"' && s != "" {
		if *t, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return errTime
		}
	}
	return nil
}

// objectNotNull refuses null for a T and decodes anything else as usual.
func objectNotNull[T any]() *json.Unmarshalers {
	return json.UnmarshalFromFunc(func(dec *jsontext.Decoder, _ *T) error {
		if dec.PeekKind() == 'n' {
			return errNull
		}
		return errors.ErrUnsupported // decode as usual
	})
}

// decodeOCSF decodes one OCSF line into ev.
func decodeOCSF(line []byte, ev *ocsfEvent) error {
	return unmarshal(line, ev, ocsfOptions)
}

// unmarshal is json.Unmarshal that reports malformed JSON as such even
// when a type error comes first (json.Unmarshal stops at the first error,
// encoding/json checks the syntax of the whole input before decoding).
func unmarshal(data []byte, v any, opts json.Options) error {
	err := json.Unmarshal(data, v, opts)
	var syn *jsontext.SyntacticError
	if err != nil && !errors.As(err, &syn) {
		var raw jsontext.Value
		if serr := json.Unmarshal(data, &raw, opts); errors.As(serr, &syn) {
			return serr
		}
	}
	return err
}

// formatError turns a decoding error into a *FormatError naming the
// attribute path ("dst_endpoint.port", "evidences[0].process.pid").
// Malformed JSON has no path: the line is not JSON at all.
func formatError(err error) error {
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return &FormatError{Reason: "invalid JSON at byte " + strconv.FormatInt(syn.ByteOffset, 10) + ": " + errText(syn.Err)}
	}
	var sem *json.SemanticError
	if !errors.As(err, &sem) {
		return &FormatError{Reason: err.Error()}
	}
	field := fieldPath(sem.JSONPointer)
	var reason string
	switch {
	case errors.Is(sem.Err, json.ErrUnknownName):
		reason = "unknown field"
	case errors.Is(sem.Err, errNull), errors.Is(sem.Err, errTime):
		reason = sem.Err.Error()
	case field == "" && sem.JSONKind != '{':
		reason = "not a JSON object (have JSON " + kindName(sem.JSONKind) + ")"
	case sem.GoType != nil && sem.JSONKind != 0 && kindName(sem.JSONKind) != goKindName(sem.GoType):
		reason = "want " + goKindName(sem.GoType) + ", have JSON " + kindName(sem.JSONKind)
	case sem.GoType != nil && sem.GoType.Kind() >= reflect.Int && sem.GoType.Kind() <= reflect.Int64:
		reason = "want an integer in range, have " + clip(string(sem.JSONValue), 32)
	default:
		reason = errText(sem.Err)
	}
	return &FormatError{Field: field, Reason: reason}
}

func errText(err error) string {
	if err == nil {
		return "invalid value"
	}
	return err.Error()
}

// fieldPath renders a JSON pointer as a dotted attribute path with
// bracketed array indexes.
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 32); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '0':
		return "number"
	}
	return "value"
}

func goKindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Struct:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Bool:
		return "boolean"
	}
	return "number"
}
