package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/l7/graphql"
	"github.com/palisade-sandbox/palisade/pkg/l7/jsonrpc"
	"github.com/palisade-sandbox/palisade/pkg/l7/rest"
	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/proxy/internal/xconnect"
)

// ReasonInspectorUnavailable: the endpoint's protocol inspector could
// not be built from it; every request of the endpoint is refused.
const ReasonInspectorUnavailable = "l7_inspector_unavailable"

// newInspector builds the protocol inspector (l7.Inspector) of an
// inspected endpoint, chosen by its protocol field: one case per
// protocol package. A constructor that fails gives an inspector that
// refuses every request of the endpoint (fail closed; policy validation
// should have refused the endpoint first).
func newInspector(ep *policy.Endpoint) l7.Inspector {
	var in l7.Inspector
	var err error
	switch ep.Protocol {
	case policy.ProtocolWebSocket:
		in, err = wsInspector(ep)
	case policy.ProtocolMCP, policy.ProtocolJSONRPC:
		in, err = jsonrpc.New(ep)
	case policy.ProtocolGraphQL:
		in, err = graphql.New(ep)
	default: // protocol rest; or access or rules on a plain endpoint (which validation refuses)
		in = rest.New(ep)
	}
	if err != nil {
		return refuseAll{}
	}
	return in
}

func wsInspector(ep *policy.Endpoint) (l7.Inspector, error) {
	in, err := websocket.New(ep)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// refuseAll refuses every request: the inspector of an endpoint whose
// own could not be built.
type refuseAll struct{}

func (refuseAll) Request(*l7.Request) l7.Decision {
	return l7.Denied(ReasonInspectorUnavailable, "")
}

// inspectorCache holds the inspectors of one generation's endpoints,
// built on first use (the decision engine's endpoints live as long as
// its generation).
type inspectorCache struct{ m sync.Map } // *policy.Endpoint -> l7.Inspector

func (c *inspectorCache) get(ep *policy.Endpoint) l7.Inspector {
	if in, ok := c.m.Load(ep); ok {
		return in.(l7.Inspector)
	}
	in, _ := c.m.LoadOrStore(ep, newInspector(ep))
	return in.(l7.Inspector)
}

// inspector is the protocol inspector of the verdict's endpoint: the
// one the Decider built for its generation, or one built now for a
// Decider that carries none (test fakes). A verdict without an endpoint
// has no L7 constraints.
func (v *Verdict) inspector() l7.Inspector {
	if v.Inspector != nil {
		return v.Inspector
	}
	ep := v.Endpoint
	if ep == nil {
		ep = &policy.Endpoint{}
	}
	return newInspector(ep)
}

// reqBody is a request body as an inspector reads it (l7.Body) and as
// the proxy then relays it: what ReadAll read first, then the rest.
type reqBody struct {
	r      io.Reader    // the body as received; nil for none
	tb     *trackedBody // a forwarded request's: whether it was read to the end
	length int64
	// begin runs before the first byte is read (a forwarded request's
	// 100 Continue); nil when nothing has to.
	begin func() error
	began bool
	read  bool // ReadAll was called
	buf   []byte
	err   error
}

// noBody is the body of a request without one.
var noBody = &reqBody{}

// newReqBody is the l7.Body of an inspected request's body.
func newReqBody(r io.ReadCloser, length int64) *reqBody {
	if r == nil || r == http.NoBody {
		return noBody
	}
	return &reqBody{r: r, length: length}
}

// forwardBody is the body of a forwarded request with framing fr (noBody
// when it has none). A client that asked for 100 Continue gets it when
// the body is first read: by the inspector, or when the request is
// relayed.
func (p *Proxy) forwardBody(c *net.TCPConn, br *bufio.Reader, fr framing) *reqBody {
	b := &reqBody{length: fr.length}
	switch {
	case fr.chunked:
		b.tb, b.length = newChunkedBody(br), -1
	case fr.length > 0:
		b.tb = newSizedBody(br, fr.length)
	default:
		return noBody
	}
	b.r = b.tb
	if fr.expect100 {
		b.begin = func() error {
			c.SetWriteDeadline(time.Now().Add(responseWriteTimeout))
			_, err := c.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
			c.SetWriteDeadline(time.Time{})
			return err
		}
	}
	return b
}

// Length implements l7.Body.
func (b *reqBody) Length() int64 { return b.length }

// start runs begin once.
func (b *reqBody) start() error {
	if b.began || b.begin == nil {
		return nil
	}
	b.began = true
	return b.begin()
}

// ReadAll implements l7.Body. A body that declared a length over max is
// refused unread.
func (b *reqBody) ReadAll(max int64) ([]byte, error) {
	if b.read {
		if b.err != nil {
			return nil, b.err
		}
		return b.buf, nil
	}
	b.read = true
	switch {
	case b.r == nil || b.length == 0:
		return nil, nil
	case b.length > max:
		b.err = l7.ErrBodyTooLarge
		return nil, b.err
	}
	if b.err = b.start(); b.err != nil {
		return nil, b.err
	}
	b.buf, b.err = io.ReadAll(io.LimitReader(b.r, max+1))
	if b.err == nil && int64(len(b.buf)) > max {
		b.err = l7.ErrBodyTooLarge
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.buf, nil
}

// reader is the body to relay: the bytes ReadAll read, then the rest.
func (b *reqBody) reader() io.Reader {
	if len(b.buf) == 0 {
		return b.r
	}
	return io.MultiReader(bytes.NewReader(b.buf), b.r)
}

// GODEBUG goes back as it was: golang.org/x/net/http2 read
// http2xconnect=1 from it (package xconnect) as it initialised.
func init() { xconnect.Restore() }
