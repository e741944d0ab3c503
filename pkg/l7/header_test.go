package l7

import (
	"net/http"
	"slices"
	"testing"
)

// Fields are read folded ("_" for "-"); a field the proxy reads for
// framing spelt with "_" is refused. (Package rest's
// TestFoldedOverrideFields reads a method override spelt with "_".)
func TestFoldedFields(t *testing.T) {
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
