package upstreamproxy

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// MaxCredentialBytes bounds the credential file: a user:pass is tiny, and
// the bound keeps a wrong path (a device, a log) from being read whole.
const MaxCredentialBytes = 4096

// credential is the Proxy-Authorization value. It is held behind a
// pointer so that printing a Chain (even with %+v) shows an address,
// never the value.
type credential struct{ header string }

// ReadCredentialFile reads a user:pass credential from path and returns
// the Proxy-Authorization header value it makes ("Basic " + base64). The
// file must be a regular file owned by root (or by this process's user)
// that nobody else may read, write or execute (mode 0600 or stricter),
// reached through no symbolic link anyone but root could re-point, and at
// most MaxCredentialBytes long. Surrounding white space (the usual
// trailing newline) is ignored; an empty credential, one with control
// characters, and one not of the form user:pass (the user non-empty, the
// first ':' separating) are refused. Errors name the path and never the
// contents.
func ReadCredentialFile(path string) (string, error) {
	raw, err := readRootOnly(path)
	if err != nil {
		return "", err
	}
	cred, err := ParseCredential(string(raw))
	clear(raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(cred)), nil
}

// ParseCredential validates a user:pass credential (white space around it
// ignored) and returns it trimmed. Errors never contain the credential.
func ParseCredential(s string) (string, error) {
	c := strings.TrimSpace(s)
	switch {
	case c == "":
		return "", errors.New("the credential is empty: want user:pass")
	case strings.IndexFunc(c, unicode.IsControl) >= 0:
		return "", errors.New("the credential contains control characters (a line break, tab or NUL): want one line user:pass")
	}
	user, _, ok := strings.Cut(c, ":")
	switch {
	case !ok:
		return "", errors.New("the credential is not of the form user:pass (no ':')")
	case user == "":
		return "", errors.New("the credential is not of the form user:pass (the user is empty)")
	}
	return c, nil
}
