package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Credentials (package credentials; docs/credentials.md): the sandbox
// holds placeholders, the proxy holds the values. A request is resolved
// after it was admitted (destination, binary, L7 rules), just before it
// goes upstream: placeholders in its header fields and query (and body,
// where the endpoint opts in) are replaced by their values where the
// credential is bound to the request's endpoint, and the request is
// refused (403) where one is not; a credential_signing endpoint's
// requests are re-signed (outgoing.go).

// Credentials returns the credentials in force (nil when none are
// configured).
func (p *Proxy) Credentials() *credentials.Store { return p.creds.Load() }

// reloadCredentials loads the credentials again (Config.Credentials). A
// load that fails revokes every value: the store in force becomes
// credentials.Revoked until a load succeeds. At start (first) the error
// is returned and the proxy does not start.
func (p *Proxy) reloadCredentials(trigger string, first bool) error {
	if p.cfg.Credentials == nil {
		return nil
	}
	st, err := p.cfg.Credentials()
	cur := p.creds.Load()
	ref := ocsf.CredentialsRef{Path: p.cfg.CredentialsPath, Generation: p.credsGen}
	if err != nil {
		if first {
			return fmt.Errorf("credentials do not load: %w", err)
		}
		msg := err.Error()
		if cur.IsRevoked() && msg == p.credsErr {
			return err // reported already
		}
		p.credsErr = msg
		p.creds.Store(credentials.Revoked())
		p.credsStatus.Store(&CredentialsStatus{Path: p.cfg.CredentialsPath, Generation: p.credsGen, Revoked: true, LastError: msg})
		p.emitEvent(p.src.CredentialsRevoked(ref, err))
		p.log.Error("credentials reload failed; every credential is revoked until a reload succeeds", "trigger", trigger, "path", p.cfg.CredentialsPath, "err", err)
		return err
	}
	if cur != nil && !cur.IsRevoked() && cur.Sum() == st.Sum() {
		return nil
	}
	p.credsGen++
	p.credsErr = ""
	p.creds.Store(st)
	p.credsStatus.Store(&CredentialsStatus{Path: p.cfg.CredentialsPath, Generation: p.credsGen, Credentials: st.Len(), Providers: st.Providers()})
	ref = ocsf.CredentialsRef{Path: p.cfg.CredentialsPath, Credentials: st.Len(), Providers: st.Providers(), Generation: p.credsGen}
	p.emitEvent(p.src.CredentialsLoaded(ref, !first))
	p.log.Info("credentials loaded", "trigger", trigger, "path", p.cfg.CredentialsPath, "credentials", st.Len(), "providers", st.Providers(), "generation", p.credsGen)
	if p.policy != nil {
		if err := credentials.CheckPolicy(p.policy, st.File()); err != nil {
			p.log.Warn("the policy in force does not agree with the new credentials; placeholders it binds are refused until it does", "err", err)
		}
	}
	return nil
}

// checkPolicyCredentials is the policy's half of the agreement: a policy
// whose credential bindings the credentials in force cannot satisfy is
// refused (with revoked credentials nothing can be checked, and nothing
// resolves anyway).
func (p *Proxy) checkPolicyCredentials(pol *policy.Policy) error {
	st := p.creds.Load()
	if st.IsRevoked() {
		return nil
	}
	return credentials.CheckPolicy(pol, st.File())
}

// resolveCredentials resolves the placeholders of one admitted request
// in place: h (its header fields) and *rawQuery. It returns nil when
// nothing was to be done; otherwise the caller must refuse the request
// when Err is not nil, and scrub with the resolver what it reports about
// the request afterwards. paths gives the readings of the request's
// decoded path. body says the request's body is to be resolved too (the
// caller then passes it through the resolver's Body).
func (p *Proxy) resolveCredentials(host string, port int, ep *policy.Endpoint, h http.Header, rawQuery *string, paths func() ([]string, bool), body bool) *credentials.Resolver {
	st := p.creds.Load()
	if st == nil || !body && !mayHoldPlaceholder(h, *rawQuery) {
		return nil
	}
	r := st.Resolver(credentialTarget(host, port, ep, paths))
	r.Header(h)
	*rawQuery = r.Query(*rawQuery)
	return r
}

// credentialTarget is what a request to ep at host:port (paths: the
// readings of its path) is to credentials: where placeholders bound to
// it resolve.
func credentialTarget(host string, port int, ep *policy.Endpoint, paths func() ([]string, bool)) *credentials.Target {
	t := &credentials.Target{Host: host, Port: port, Paths: paths}
	if ep != nil && ep.CredentialBinding != nil {
		t.Binding = ep.CredentialBinding.Provider
	}
	return t
}

// refusedReason is the reason of a Resolver's error.
func refusedReason(err error) string {
	var cr *credentials.Refusal
	if errors.As(err, &cr) {
		return cr.Reason
	}
	return credentials.ReasonUnknown
}

// messageCredentials is what the client's text messages on an upgraded
// protocol: websocket connection to ep (at host:port, the upgrade's path
// readings paths) go through when credentials are configured (nil when
// none are): each message that may hold a placeholder is resolved
// against the credentials in force when it arrives, with the same
// scoped resolver as a request (seed 004). A placeholder that may not be
// resolved there (credential_endpoint_mismatch, credential_unknown,
// credentials_revoked) refuses the message: the connection closes with
// 1008 and the message goes nowhere. A bound one is replaced by its
// value only where the endpoint opted in (websocket_credential_rewrite);
// otherwise the message is relayed as the client sent it (the
// placeholder, never a value, reaches the upstream). The rules have
// judged the message as sent before this runs.
func (p *Proxy) messageCredentials(host string, port int, ep *policy.Endpoint, paths func() ([]string, bool)) websocket.Rewrite {
	if p.creds.Load() == nil {
		return nil
	}
	t := credentialTarget(host, port, ep, paths)
	rewrite := ep != nil && ep.WebSocketCredentialRewrite
	return func(text []byte) ([]byte, *websocket.Refusal) {
		if !bytes.Contains(text, []byte("openshell")) {
			return text, nil
		}
		r := p.creds.Load().Resolver(t)
		out := r.Text(text)
		if err := r.Err(); err != nil {
			return nil, &websocket.Refusal{Code: websocket.ClosePolicyViolation, Decision: l7.Denied(refusedReason(err), "")}
		}
		if !rewrite {
			return text, nil
		}
		return out, nil
	}
}

// credentialReason reports whether a refusal's reason is a credential
// placeholder's (credentials.Reason*).
func credentialReason(reason string) bool {
	switch reason {
	case credentials.ReasonEndpointMismatch, credentials.ReasonUnknown, credentials.ReasonRevoked:
		return true
	}
	return false
}

// rewritesBody reports whether an admitted request's body is read for
// placeholders: the endpoint opted in (request_body_credential_rewrite),
// credentials are configured, and the body is of a type they are looked
// for in (credentials.RewritableBody).
func (p *Proxy) rewritesBody(ep *policy.Endpoint, contentType string, hasBody bool) bool {
	return hasBody && ep != nil && ep.RequestBodyCredentialRewrite && p.creds.Load() != nil && credentials.RewritableBody(contentType)
}

// mayHoldPlaceholder is the cheap test every request pays when
// credentials are configured.
func mayHoldPlaceholder(h http.Header, rawQuery string) bool {
	if credentials.MayHold(rawQuery) {
		return true
	}
	for _, vv := range h {
		for _, v := range vv {
			if credentials.MayHold(v) {
				return true
			}
		}
	}
	return false
}

// pathReadings returns the readings of a parsed request path.
func pathReadings(p *l7.Path) func() ([]string, bool) {
	return func() ([]string, bool) {
		return append([]string{p.Decoded}, p.Alternates...), true
	}
}

// targetReadings parses a request target's path for a binding's path
// prefix; a path that does not parse binds no prefix.
func targetReadings(escapedPath string) func() ([]string, bool) {
	return func() ([]string, bool) {
		p, err := l7.ParsePath(escapedPath)
		if err != nil {
			return nil, false
		}
		return append([]string{p.Decoded}, p.Alternates...), true
	}
}

// forwardCredentials resolves the placeholders of an admitted forwarded
// http:// request (and its body where the endpoint opts in: read here,
// through req.body — what an inspector read of it first, then the rest,
// after a 100 Continue if the client asked for one) and re-signs it on
// a credential_signing endpoint, before anything is dialled; it answers
// the refusal (403, or 413/400) and reports false when the request may
// not go.
func (p *Proxy) forwardCredentials(c *net.TCPConn, rec *Record, req *request, ep *policy.Endpoint) bool {
	req.header = forwardHeader(req.head)
	if !p.preparesOutgoing(ep) {
		return true
	}
	fr := req.framing
	o := &outgoing{method: req.head.Method, host: rec.Host, port: rec.Port, hostHeader: req.url.Host, path: req.url.EscapedPath(),
		query: req.url.RawQuery, header: req.header, ep: ep, paths: targetReadings(req.url.EscapedPath()),
		hasBody: fr.chunked || fr.length > 0, length: fr.length}
	if fr.chunked {
		o.length = -1
	}
	if o.hasBody {
		o.body, o.beforeBody = req.body.reader(), req.body.start
	}
	c.SetReadDeadline(time.Now().Add(p.cfg.Limits.IdleTimeout))
	rf := p.prepareOutgoing(o)
	c.SetReadDeadline(time.Time{})
	if rf != nil {
		rec.CredentialRefused = true
		switch {
		case rf.gone:
			// The 100 Continue could not be written: nothing went
			// upstream, and there is no client to answer.
			rec.Outcome, rec.Reason = OutcomeClientGone, ReasonClientClosed
			c.Close()
		case rf.deny:
			rec.Reason, rec.CredentialMisuse = rf.reason, rf.misuse
			p.deny(c, rec, OutcomePolicyDenied)
		default:
			p.badRequest(c, rec, rf.status, rf.reason, headErrorf("%s", rf.detail))
		}
		return false
	}
	if o.query != req.url.RawQuery {
		// The record keeps the URL as the client sent it (placeholders);
		// only what goes upstream holds values.
		u := *req.url
		u.RawQuery = o.query
		req.url = &u
	}
	req.prepared, req.scrub = o.read, o.scrub
	return true
}
