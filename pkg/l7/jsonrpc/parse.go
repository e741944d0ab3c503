// Package jsonrpc decides the requests of protocol json-rpc and protocol
// mcp endpoints by their bodies: the JSON-RPC 2.0 messages a sandbox
// sends a server over HTTP (MCP's streamable HTTP transport is JSON-RPC
// over POST, with a GET that opens a stream of server messages).
//
// Parse reads one request body, at most the endpoint's max_body_bytes,
// with github.com/go-json-experiment/json's streaming jsontext decoder
// (no hand-written JSON parser): invalid UTF-8, duplicate member names at
// any depth, nesting deeper than the decoder's 10,000 levels and
// trailing data are errors. A member that spells a name the decision
// reads in another letter case ("Method", "paramſ") is refused too:
// servers built on encoding/json read member names case-insensitively
// and would act on it. Decide then judges the request as the proxy
// does: for mcp the MCP-Protocol-Version header against the endpoint's
// allowlist, the revision's batch shape, the recommended tool-name
// syntax, then the rules (method, and the tools/call tool name);
// for json-rpc the method only. Responses the server streams back (the
// response body or its server-sent events) are relayed, not read.
package jsonrpc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Kind is what a JSON-RPC message is.
type Kind int

const (
	KindRequest      Kind = iota // a method call with an id
	KindNotification             // a method call without an id
	KindResponse                 // a result or error answering the other side's request
)

// Message is what the decision reads of one JSON-RPC message: never its
// params beyond the tools/call tool name, never an id's value.
type Message struct {
	Kind   Kind
	Method string // "" for a response
	// Tool is an MCP tools/call's params.name ("" otherwise).
	Tool string
}

// Body is one parsed request body.
type Body struct {
	Messages []Message
	// Batch marks a top-level array (even of one message).
	Batch bool
}

// ErrInvalid wraps every reason a body is not one JSON-RPC 2.0 message
// or batch (or, in MCP mode, not of MCP's shape).
var ErrInvalid = errors.New("not a JSON-RPC 2.0 request body")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// decoders holds jsontext decoders for reuse: one costs several
// allocations, a body is parsed in microseconds.
var decoders = sync.Pool{New: func() any { return jsontext.NewDecoder(emptyBuffer) }}

var emptyBuffer = bytes.NewBuffer(nil)

// maxBatchMembers bounds the members Parse collects (the body bound
// bounds them already; this keeps a 1 MiB body of "[{},{},...]" cheap).
const maxBatchMembers = 4096

// Parse reads a request body: one JSON-RPC 2.0 message, or a nonempty
// top-level array of them. With mcp set, MCP's shapes are required too:
// params, when present, is an object; a tools/call carries a string
// params.name; an initialize carries a string params.protocolVersion.
func Parse(body []byte, mcp bool) (*Body, error) {
	if !utf8.Valid(body) {
		return nil, invalid("body is not UTF-8")
	}
	dec := decoders.Get().(*jsontext.Decoder)
	defer func() { dec.Reset(emptyBuffer); decoders.Put(dec) }()
	// A bytes.Buffer is parsed in place (no copy into the decoder).
	dec.Reset(bytes.NewBuffer(body))
	out := &Body{}
	switch dec.PeekKind() {
	case '[':
		out.Batch = true
		if _, err := dec.ReadToken(); err != nil {
			return nil, invalid("%v", err)
		}
		for dec.PeekKind() != ']' {
			if len(out.Messages) == maxBatchMembers {
				return nil, invalid("more than %d batch members", maxBatchMembers)
			}
			m, err := parseMessage(dec, mcp)
			if err != nil {
				return nil, err
			}
			out.Messages = append(out.Messages, m)
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, invalid("%v", err)
		}
		if len(out.Messages) == 0 {
			return nil, invalid("empty batch")
		}
	case '{':
		m, err := parseMessage(dec, mcp)
		if err != nil {
			return nil, err
		}
		out.Messages = []Message{m}
	default:
		return nil, invalid("body is neither a JSON object nor an array")
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, invalid("data after the message")
	}
	return out, nil
}

// envelope collects the members of one message object.
type envelope struct {
	version    string
	hasVersion bool
	method     string
	hasMethod  bool
	hasID      bool
	hasResult  bool
	hasError   bool
	hasParams  bool
	paramsKind jsontext.Kind
	idKind     jsontext.Kind
	// The members of an object params MCP's decision reads: a
	// tools/call's name, an initialize's protocolVersion (read in MCP
	// mode only), each with whether it was present and a string.
	mcp                  bool
	name, version2       string
	hasName, hasVersion2 bool
	badName, badVersion2 bool
}

// messageMembers are the names of a message the decision reads.
var messageMembers = []string{"jsonrpc", "method", "id", "params", "result", "error"}

func parseMessage(dec *jsontext.Decoder, mcp bool) (Message, error) {
	env := envelope{mcp: mcp}
	if err := readObject(dec, messageMembers, func(name string) error { return env.member(dec, name) }); err != nil {
		return Message{}, err
	}
	return env.message(mcp)
}

// readObject is l7.ReadJSONObject (names in known spelt in another
// letter case refused) with its errors wrapping ErrInvalid.
func readObject(dec *jsontext.Decoder, known []string, member func(name string) error) error {
	return asInvalid(l7.ReadJSONObject(dec, known, false, member))
}

func (env *envelope) member(dec *jsontext.Decoder, name string) error {
	switch name {
	case "jsonrpc":
		s, err := readString(dec, name)
		env.version, env.hasVersion = s, true
		return err
	case "method":
		s, err := readString(dec, name)
		env.method, env.hasMethod = s, true
		return err
	case "id":
		env.hasID, env.idKind = true, dec.PeekKind()
	case "result":
		env.hasResult = true
	case "error":
		env.hasError = true
	case "params":
		env.hasParams, env.paramsKind = true, dec.PeekKind()
		if env.mcp && env.paramsKind == '{' {
			return env.mcpParams(dec)
		}
	}
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

// message checks one collected envelope.
func (env *envelope) message(mcp bool) (Message, error) {
	if !env.hasVersion || env.version != "2.0" {
		return Message{}, invalid(`"jsonrpc" must be "2.0"`)
	}
	if env.hasID {
		switch env.idKind {
		case '"', '0':
		case 'n':
			if mcp {
				return Message{}, invalid("an MCP id must be a string or a number, not null")
			}
		default:
			return Message{}, invalid("an id must be a string, a number or null")
		}
	}
	if !env.hasMethod {
		if env.hasResult == env.hasError || !env.hasID || env.hasParams {
			return Message{}, invalid("a message without a method must be a response: an id and exactly one of result and error")
		}
		return Message{Kind: KindResponse}, nil
	}
	if env.hasResult || env.hasError {
		return Message{}, invalid("a message has both a method and a result or error")
	}
	if env.method == "" || strings.ContainsRune(env.method, utf8.RuneError) {
		return Message{}, invalid("the method name is empty or holds U+FFFD")
	}
	m := Message{Kind: KindNotification, Method: env.method}
	if env.hasID {
		m.Kind = KindRequest
	}
	switch {
	case !env.hasParams || env.paramsKind == '{':
	case mcp:
		return Message{}, invalid("MCP params must be an object")
	case env.paramsKind != '[':
		return Message{}, invalid("params must be an object or an array")
	}
	if !mcp {
		return m, nil
	}
	return mcpMessage(m, env)
}

// mcpParams reads an object params in MCP mode, keeping the members
// mcpMessage checks (a member spelling one of them in another letter
// case is refused, as at the top level).
func (env *envelope) mcpParams(dec *jsontext.Decoder) error {
	return readObject(dec, []string{"name", "protocolVersion"}, func(name string) error {
		var val *string
		var has, bad *bool
		switch name {
		case "name":
			val, has, bad = &env.name, &env.hasName, &env.badName
		case "protocolVersion":
			val, has, bad = &env.version2, &env.hasVersion2, &env.badVersion2
		default:
			if err := dec.SkipValue(); err != nil {
				return invalid("%v", err)
			}
			return nil
		}
		*has = true
		if dec.PeekKind() != '"' {
			*bad = true
			if err := dec.SkipValue(); err != nil {
				return invalid("%v", err)
			}
			return nil
		}
		s, err := readString(dec, name)
		*val = s
		return err
	})
}

// mcpMessage checks the params the decision depends on: a tools/call's
// name, an initialize's protocolVersion, each a string.
func mcpMessage(m Message, env *envelope) (Message, error) {
	var has, bad bool
	var want string
	switch {
	case m.Method == policy.MCPToolCall && m.Kind == KindRequest:
		want, has, bad = "name", env.hasName, env.badName
	case m.Method == "initialize" && m.Kind == KindRequest:
		want, has, bad = "protocolVersion", env.hasVersion2, env.badVersion2
	case m.Method == policy.MCPToolCall || m.Method == "initialize":
		return Message{}, invalid("%s must be a request (with an id)", m.Method)
	default:
		return m, nil
	}
	switch {
	case !has:
		return Message{}, invalid("%s needs params.%s", m.Method, want)
	case bad:
		return Message{}, invalid("params.%s must be a string", want)
	}
	if want == "name" {
		m.Tool = env.name
	}
	return m, nil
}
