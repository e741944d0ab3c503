package finalizer

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Size caps of the files root reads from a workspace. A FIFO, a device or
// a huge sparse file never gets past them.
const (
	maxJSONBytes      = 1 << 20  // mac-evidence.json, finalizer-progress.json, a recovery record
	maxRefBytes       = 4 << 10  // HEAD, a loose ref
	maxConfigBytes    = 1 << 20  // .git/config
	maxPackedRefBytes = 64 << 20 // .git/packed-refs
	maxIndexBytes     = 1 << 30  // .git/index
	maxShallowBytes   = 16 << 20 // .git/shallow
)

// MaxObjectBytes bounds the objects copied from a preserved repository
// into the private mirror recovery works in.
var MaxObjectBytes int64 = 8 << 30

// SpecialFileError is a workspace path root refuses to read or let git
// use: a symlink, FIFO, socket, device, hard link, directory where a file
// belongs, or an oversized file.
type SpecialFileError struct {
	Path string
	What string
}

func (e *SpecialFileError) Error() string {
	return fmt.Sprintf("refusing %s: %s", quotePath(e.Path), e.What)
}

// quotePath renders a file name for plans, records and messages: as is
// when it consists of printable characters without quotes or
// backslashes, else Go-quoted, so no name can start a line of its own or
// carry terminal control sequences.
func quotePath(p string) string {
	if p == "" || strings.ContainsFunc(p, func(r rune) bool {
		return r == '"' || r == '\\' || r == utf8RuneError || !unicode.IsPrint(r) || (r != ' ' && unicode.IsSpace(r))
	}) || strings.HasPrefix(p, " ") || strings.HasSuffix(p, " ") {
		return strconv.Quote(p)
	}
	return p
}

const utf8RuneError = '\uFFFD'

func quotePaths(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = quotePath(p)
	}
	return strings.Join(q, ", ")
}
