package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Credentials (package credentials; docs/credentials.md): the sandbox
// holds placeholders, the proxy holds the values. A request is resolved
// after it was admitted (destination, binary, L7 rules), just before it
// goes upstream: placeholders in its header fields and query are
// replaced by their values where the credential is bound to the
// request's endpoint, and the request is refused (403) where one is not.

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
	t := &credentials.Target{Host: host, Port: port, Paths: paths}
	if ep != nil && ep.CredentialBinding != nil {
		t.Binding = ep.CredentialBinding.Provider
	}
	r := st.Resolver(t)
	r.Header(h)
	*rawQuery = r.Query(*rawQuery)
	return r
}

// rewritesBody reports whether an admitted request's body is read for
// placeholders: the endpoint opted in (request_body_credential_rewrite),
// credentials are configured, and the body is of a type they are looked
// for in (credentials.RewritableBody).
func (p *Proxy) rewritesBody(ep *policy.Endpoint, contentType string, hasBody bool) bool {
	return hasBody && ep != nil && ep.RequestBodyCredentialRewrite && p.creds.Load() != nil && credentials.RewritableBody(contentType)
}

// readRewriteBody reads a request body to be resolved: at most
// credentials.MaxBody bytes (tooLarge when there are more, or when the
// declared length says so before anything is read).
func readRewriteBody(r io.Reader, declared int64) (b []byte, tooLarge bool, err error) {
	if declared > credentials.MaxBody {
		return nil, true, nil
	}
	b, err = io.ReadAll(io.LimitReader(r, credentials.MaxBody+1))
	if len(b) > credentials.MaxBody {
		return nil, true, nil
	}
	return b, false, err
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

// refuseCredentials records a request refused for its placeholders: the
// refusal's reason, and a Detection Finding when the placeholder went to
// an endpoint it is not bound to.
func refuseCredentials(rec *Record, err error) {
	rf, _ := err.(*credentials.Refusal)
	rec.Reason = credentials.ReasonUnknown
	if rf != nil {
		rec.Reason = rf.Reason
	}
	rec.CredentialRefused = true
	rec.CredentialMisuse = rec.Reason == credentials.ReasonEndpointMismatch
}

// forwardCredentials resolves the placeholders of an admitted forwarded
// http:// request (and of its body, where the endpoint opted in: read
// here, after a 100 Continue if the client asked for one) before
// anything is dialled; it answers 403 (413 for a body too large to
// resolve) and reports false when one may not be resolved.
func (p *Proxy) forwardCredentials(c *net.TCPConn, br *bufio.Reader, rec *Record, req *request, ep *policy.Endpoint) bool {
	req.header = forwardHeader(req.head)
	query := req.url.RawQuery
	paths := targetReadings(req.url.EscapedPath())
	fr := req.framing
	ctype := req.header.Get("Content-Type")
	withBody := p.rewritesBody(ep, ctype, fr.chunked || fr.length > 0)
	res := p.resolveCredentials(rec.Host, rec.Port, ep, req.header, &query, paths, withBody)
	if res == nil {
		return true
	}
	if withBody {
		if fr.length > credentials.MaxBody {
			p.bodyTooLarge(c, rec)
			return false
		}
		if fr.expect100 {
			c.SetWriteDeadline(time.Now().Add(responseWriteTimeout))
			_, err := c.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
			c.SetWriteDeadline(time.Time{})
			if err != nil {
				// Nothing went upstream, and there is no client to
				// answer.
				rec.Outcome, rec.Reason = OutcomeClientGone, ReasonClientClosed
				c.Close()
				return false
			}
		}
		var tb *trackedBody
		if fr.chunked {
			tb = newChunkedBody(br)
		} else {
			tb = newSizedBody(br, fr.length)
		}
		c.SetReadDeadline(time.Now().Add(p.cfg.Limits.IdleTimeout))
		b, tooLarge, err := readRewriteBody(tb, fr.length)
		c.SetReadDeadline(time.Time{})
		switch {
		case tooLarge:
			p.bodyTooLarge(c, rec)
			return false
		case err != nil:
			p.badRequest(c, rec, http.StatusBadRequest, ReasonMalformed, headErrorf("request body could not be read"))
			return false
		}
		req.body = res.Body(b, ctype)
	}
	if err := res.Err(); err != nil {
		refuseCredentials(rec, err)
		p.deny(c, rec, OutcomePolicyDenied)
		return false
	}
	if res.Injected() {
		// The record keeps the URL as the client sent it (placeholders);
		// only what goes upstream holds values.
		u := *req.url
		u.RawQuery = query
		req.url = &u
		req.scrub = res.Scrub
	}
	return true
}

// bodyTooLarge answers a forwarded request whose body is too large to
// resolve placeholders in (request_body_credential_rewrite): 413.
func (p *Proxy) bodyTooLarge(c *net.TCPConn, rec *Record) {
	rec.CredentialRefused = true
	p.badRequest(c, rec, http.StatusRequestEntityTooLarge, credentials.ReasonBodyTooLarge,
		headErrorf("request body over %d bytes on an endpoint that resolves credential placeholders in bodies", credentials.MaxBody))
}
