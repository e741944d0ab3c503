package l7

import (
	"net/http"
	"slices"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// A method override spelt with "_" (WSGI and CGI read it as the "-"
// spelling) is read as the method; a field the proxy reads for framing
// spelt with "_" is refused.
func TestFoldedFields(t *testing.T) {
	ro := &policy.Endpoint{Access: policy.AccessReadOnly}
	for _, name := range []string{"X_HTTP_Method_Override", "x_http_method_override", "X-Http_Method-Override", "X_Method_Override", "X_HTTP_METHOD"} {
		h := http.Header{}
		h[name] = []string{"DELETE"} // as received: Go keeps a name with "_" as sent
		if ok, why := checkPath(t, ro, "GET", "/item", h); ok || why != policy.L7AccessDenied {
			t.Errorf("GET with %s: DELETE = %v %q, want refused", name, ok, why)
		}
	}
	h := http.Header{"Content-Type": {"text/plain"}, "Content_type": {"application/x-git-upload-pack-request"}}
	if got := FieldValues(h)("Content-Type"); !slices.Contains(got, "text/plain") || len(got) != 2 {
		t.Errorf("Content-Type values %q, want both spellings", got)
	}
	for name, refused := range map[string]bool{
		"Transfer_Encoding": true, "content_length": true, "Host_": false, "X_Host": false, "HOST": false,
		"Proxy_Authorization": true, "Connection": false, "Upgrade_": false, "X_Forwarded_For": false,
	} {
		if got := CheckFieldName(name) != nil; got != refused {
			t.Errorf("CheckFieldName(%q) refused %v, want %v", name, got, refused)
		}
	}
}
