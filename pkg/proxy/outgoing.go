package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/sigv4"
)

// outgoing is an admitted request about to go upstream, as the proxy
// will send it: what credential resolution and SigV4 re-signing
// (prepareOutgoing) read and change. Both transports fill it: an
// inspected tunnel's requests (relay) and forwarded http:// ones
// (forwardCredentials).
type outgoing struct {
	method     string
	host       string // the canonical host the request was decided for
	port       int
	hostHeader string // the Host (:authority) sent upstream
	path       string // the escaped path sent upstream
	query      string // the raw query sent upstream; changed in place
	header     http.Header
	ep         *policy.Endpoint
	paths      func() ([]string, bool)
	hasBody    bool
	length     int64 // the body's declared length; -1 when unknown (chunked)
	body       io.Reader
	// beforeBody, when set, runs once before the body is first read
	// (a forwarded request's 100 Continue).
	beforeBody func() error

	// read is the body, read and resolved or hashed; when set it goes
	// upstream instead of the client's stream.
	read  []byte
	scrub func(string) string
}

// refusal is why prepareOutgoing did not let a request go: a 403 denial
// (deny; misuse adds a Detection Finding) or another status with a
// detail; gone: the client left while the proxy waited for its body.
type refusal struct {
	deny, misuse, gone bool
	status             int
	reason, detail     string
}

// Limits and reasons of SigV4 re-signing.
const (
	// MaxSignedBody bounds a body read to be signed (OpenShell's bound
	// for sigv4:body): larger is 413.
	MaxSignedBody = 10 << 20

	ReasonSigV4ChunkSigned  = "sigv4_chunk_signed_payload"   // 403: STREAMING-AWS4-*
	ReasonSigV4ContentSHA   = "sigv4_invalid_content_sha256" // 400
	ReasonSigV4Region       = "sigv4_region_unknown"         // 403: neither the host nor signing_region names one
	ReasonSigV4BodyTooLarge = "sigv4_body_too_large"         // 413
)

// preparesOutgoing reports whether requests admitted to ep go through
// prepareOutgoing: credentials are configured, or ep signs (the load
// refuses signing without credentials, so the second only guards).
func (p *Proxy) preparesOutgoing(ep *policy.Endpoint) bool {
	return p.creds.Load() != nil || ep != nil && ep.CredentialSigning != ""
}

// prepareOutgoing resolves the request's credential placeholders (header
// fields, query, and the body where the endpoint opts in) and, on a
// credential_signing endpoint, re-signs it. It returns nil when the
// request may go.
func (p *Proxy) prepareOutgoing(o *outgoing) *refusal {
	signing := o.ep != nil && o.ep.CredentialSigning != ""
	var plan *signPlan
	if signing {
		var rf *refusal
		if plan, rf = prepareSigning(o); rf != nil {
			return rf
		}
	}
	ctype := o.header.Get("Content-Type")
	withBody := !signing && p.rewritesBody(o.ep, ctype, o.hasBody)
	res := p.resolveCredentials(o.host, o.port, o.ep, o.header, &o.query, o.paths, withBody)
	if withBody && res != nil {
		b, rf := o.readBody(credentials.MaxBody, credentials.ReasonBodyTooLarge, "resolves credential placeholders in bodies")
		if rf != nil {
			return rf
		}
		o.read = res.Body(b, ctype)
	}
	if res != nil {
		if err := res.Err(); err != nil {
			var cr *credentials.Refusal
			reason := credentials.ReasonUnknown
			if errors.As(err, &cr) {
				reason = cr.Reason
			}
			return &refusal{deny: true, status: http.StatusForbidden, reason: reason, misuse: reason == credentials.ReasonEndpointMismatch}
		}
		if res.Injected() {
			o.scrub = res.Scrub
		}
	}
	if signing {
		return p.sign(o, plan)
	}
	return nil
}

// readBody reads the request's body, at most limit bytes (413 with
// reason beyond: before reading when the declared length says so).
func (o *outgoing) readBody(limit int64, reason, what string) ([]byte, *refusal) {
	tooLarge := &refusal{status: http.StatusRequestEntityTooLarge, reason: reason,
		detail: fmt.Sprintf("request body over %d bytes on an endpoint that %s", limit, what)}
	if o.length > limit {
		return nil, tooLarge
	}
	if o.beforeBody != nil {
		if err := o.beforeBody(); err != nil {
			return nil, &refusal{gone: true}
		}
	}
	b, err := io.ReadAll(io.LimitReader(o.body, limit+1))
	switch {
	case int64(len(b)) > limit:
		return nil, tooLarge
	case err != nil:
		return nil, &refusal{status: http.StatusBadRequest, reason: ReasonMalformed, detail: "request body could not be read"}
	}
	return b, nil
}

// signPlan is what prepareSigning learnt of the client's own signature.
type signPlan struct {
	payload sigv4.Payload
	signed  []string // header fields the client signed that are signed again
}

// notResigned are fields the client may have signed that the proxy does
// not sign again: its own SigV4 fields (set anew), fields that change
// hop by hop or are regenerated by the transport.
var notResigned = []string{"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256",
	"expect", "user-agent", "x-amzn-trace-id", "content-length", "transfer-encoding", "connection", "te",
	"trailer", "upgrade", "keep-alive", "proxy-authorization", "host"}

// alwaysSigned are signed whenever present, whatever the client signed.
var alwaysSigned = []string{"content-type", "content-md5", "content-encoding"}

// prepareSigning strips the client's placeholder-signed SigV4 fields
// (Authorization, X-Amz-Date, X-Amz-Security-Token, X-Amz-Content-Sha256)
// and decides the payload mode: the endpoint's override, else the
// client's x-amz-content-sha256 (seed 004). A chunk-signed payload is
// refused: its per-chunk signatures cannot be made again.
func prepareSigning(o *outgoing) (*signPlan, *refusal) {
	h := o.header
	plan := &signPlan{}
	if _, list, ok := strings.Cut(h.Get("Authorization"), "SignedHeaders="); ok {
		list, _, _ = strings.Cut(list, ",")
		for _, n := range strings.Split(strings.TrimSpace(list), ";") {
			n = strings.ToLower(strings.TrimSpace(n))
			if n != "" && !slices.Contains(notResigned, n) && !slices.Contains(plan.signed, n) {
				plan.signed = append(plan.signed, n)
			}
		}
	}
	client := h.Get("X-Amz-Content-Sha256")
	for _, k := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"} {
		h.Del(k)
	}
	payload, err := sigv4.DetectPayload(client, o.hasBody, o.length >= 0)
	switch {
	case errors.Is(err, sigv4.ErrChunkSigned):
		return nil, &refusal{deny: true, status: http.StatusForbidden, reason: ReasonSigV4ChunkSigned}
	case err != nil && o.ep.CredentialSigning == policy.SigningSigV4:
		return nil, &refusal{status: http.StatusBadRequest, reason: ReasonSigV4ContentSHA, detail: "x-amz-content-sha256 is neither a SHA-256 nor a known payload mode"}
	}
	switch o.ep.CredentialSigning {
	case policy.SigningSigV4Body:
		if payload != sigv4.StreamingUnsignedTrailer {
			payload = sigv4.SignBody
		}
	case policy.SigningSigV4NoBody:
		if payload != sigv4.StreamingUnsignedTrailer {
			payload = sigv4.Unsigned
		}
	}
	plan.payload = payload
	return plan, nil
}

// sign re-signs the request with the AWS credentials bound to it, for
// the endpoint's signing_service, in signing_region or the region its
// host names, reading and hashing the body when the payload is signed.
func (p *Proxy) sign(o *outgoing, plan *signPlan) *refusal {
	ep := o.ep
	region := ep.SigningRegion
	if region == "" {
		var ok bool
		if region, ok = sigv4.RegionFromHost(o.host); !ok {
			return &refusal{deny: true, status: http.StatusForbidden, reason: ReasonSigV4Region}
		}
	}
	t := &credentials.Target{Host: o.host, Port: o.port, Paths: o.paths}
	if ep.CredentialBinding != nil {
		t.Binding = ep.CredentialBinding.Provider
	}
	c, reason := p.creds.Load().AWS(t)
	if reason != "" {
		return &refusal{deny: true, status: http.StatusForbidden, reason: reason}
	}
	hash := sigv4.EmptySHA256
	switch {
	case plan.payload == sigv4.Unsigned:
		hash = sigv4.UnsignedPayload
	case plan.payload == sigv4.StreamingUnsignedTrailer:
		hash = sigv4.StreamingUnsignedPayloadTrailer
	case o.hasBody:
		b, rf := o.readBody(MaxSignedBody, ReasonSigV4BodyTooLarge, "signs request bodies")
		if rf != nil {
			return rf
		}
		o.read = b
		sum := sha256.Sum256(b)
		hash = hex.EncodeToString(sum[:])
	}
	now := p.now()
	h := o.header
	h.Set("X-Amz-Date", now.UTC().Format(sigv4.TimeFormat))
	h.Set("X-Amz-Content-Sha256", hash)
	if c.SessionToken != "" {
		h.Set("X-Amz-Security-Token", c.SessionToken)
	}
	signed := slices.Clone(plan.signed)
	for name := range h {
		ln := strings.ToLower(name)
		if (strings.HasPrefix(ln, "x-amz-") || slices.Contains(alwaysSigned, ln)) && !slices.Contains(signed, ln) {
			signed = append(signed, ln)
		}
	}
	sig := sigv4.Sign(&sigv4.Request{Method: o.method, Host: o.hostHeader, Path: o.path, Query: o.query,
		Header: h, Signed: signed, PayloadHash: hash}, c, sigv4.ForService(ep.SigningService, region, now))
	h.Set("Authorization", sig.Authorization)
	scrub := o.scrub
	o.scrub = func(s string) string {
		if scrub != nil {
			s = scrub(s)
		}
		if c.SessionToken != "" {
			s = strings.ReplaceAll(s, c.SessionToken, "[credential]")
		}
		return s
	}
	return nil
}
