package proxy

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Frames writes a client's preface and HEADERS for stream 1 (padded,
// with priority, split into a CONTINUATION), and the server's refusal.
func h2Frames(t testing.TB) (client, server []byte) {
	var cb, sb, hb bytes.Buffer
	cb.WriteString(http2.ClientPreface)
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "PUT"}, {":path", "/objects/1?sig=x"}, {":scheme", "https"}, {":authority", "a.test"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr := http2.NewFramer(&cb, nil)
	fr.WriteSettings()
	block := hb.Bytes()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:5], PadLength: 3, Priority: http2.PriorityParam{Weight: 7}})
	fr.WriteContinuation(1, true, block[5:])
	sfr := http2.NewFramer(&sb, nil)
	sfr.WriteSettings()
	sfr.WriteRSTStream(1, http2.ErrCodeProtocol)
	return cb.Bytes(), sb.Bytes()
}

// The watch reads frames however the bytes are split, and reports a
// stream the server reset before answering, once, with its method and
// path.
func TestH2WatchSplits(t *testing.T) {
	client, server := h2Frames(t)
	for split := 1; split <= 17; split++ {
		var got []string
		w := newH2Watch(func(m, p, cause string) { got = append(got, m+" "+p+" "+cause) })
		for i := 0; i < len(client); i += split {
			w.clientBytes(client[i:min(i+split, len(client))])
		}
		for i := 0; i < len(server); i += split {
			w.serverBytes(server[i:min(i+split, len(server))])
		}
		w.serverBytes(server[len(server)-13:]) // the same RST again
		if len(got) != 1 || got[0] != "PUT /objects/1?sig=x RST_STREAM PROTOCOL_ERROR" {
			t.Fatalf("split %d: %q", split, got)
		}
	}
	// A stream the handler saw is not reported.
	w := newH2Watch(func(m, p, cause string) { t.Errorf("reported %s %s", m, p) })
	w.clientBytes(client)
	w.seen("PUT", "/objects/1?sig=x")
	w.serverBytes(server)
}

func FuzzH2Watch(f *testing.F) {
	c, s := h2Frames(f)
	f.Add(c, s, uint8(3))
	f.Fuzz(func(t *testing.T, client, server []byte, split uint8) {
		w := newH2Watch(func(string, string, string) {})
		n := int(split) + 1
		for i := 0; i < len(client); i += n {
			w.clientBytes(client[i:min(i+n, len(client))])
		}
		for i := 0; i < len(server); i += n {
			w.serverBytes(server[i:min(i+n, len(server))])
		}
	})
}
