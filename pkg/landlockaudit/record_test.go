package landlockaudit

import (
	"regexp"
	"strconv"
	"testing"
)

const (
	accessRec  = `audit(1796137112.275:2): domain=1e7a7a6b6 blockers=fs.read_file path="/dev/null" dev="devtmpfs" ino=3`
	domainRec  = `audit(1796137112.275:2): domain=1e7a7a6b6 status=allocated mode=enforcing pid=19754 uid=0 exe="/tmp/x/landlockaudit.test" comm="landlockaudit.t"`
	syscallRec = `audit(1796137112.275:2): arch=c000003e syscall=257 success=no exit=-13 a0=ffffffffffffff9c items=0 ppid=19747 pid=19754 auid=4294967295 uid=0 comm="cat" exe="/usr/bin/cat" key=(null)`
)

func TestParseRecord(t *testing.T) {
	r, err := ParseRecord(TypeLandlockAccess, []byte(accessRec))
	if err != nil {
		t.Fatal(err)
	}
	if r.Serial != 2 || r.Millis != 1796137112275 || get(&r, "blockers") != "fs.read_file" || get(&r, "path") != "/dev/null" || get(&r, "ino") != "3" {
		t.Fatalf("%+v", r)
	}
	// Untrusted strings with spaces or quotes arrive hex-encoded.
	r, err = ParseRecord(TypeLandlockAccess, []byte(`audit(1.001:7): domain=1 blockers=fs.write_file path=2F746D702F6120622022632E747874 dev="vda" ino=9`))
	if err != nil || get(&r, "path") != `/tmp/a b "c.txt` || r.Millis != 1001 {
		t.Fatalf("hex path: %+v %v", r, err)
	}
	r, _ = ParseRecord(TypeSyscall, []byte(syscallRec))
	if get(&r, "pid") != "19754" || get(&r, "exe") != "/usr/bin/cat" || get(&r, "key") != "(null)" {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []string{"", "audit(", "audit(1:2): x", "audit(1.2): x", "audit(1.2:x): a=b", "audit(1.2000:3): a=b", "nope"} {
		if _, err := ParseRecord(1, []byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{accessRec, domainRec, syscallRec, `audit(1.001:7): path=2F6120 x`, `audit(1.1:1): a="unterminated`, `audit(1.1:1):    `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRecord(TypeLandlockAccess, []byte(s))
		if err != nil {
			return
		}
		if len(r.Fields) > maxFields {
			t.Fatalf("%d fields", len(r.Fields))
		}
		n := 0
		for _, f := range r.Fields {
			n += len(f.Key) + len(f.Value)
		}
		if n > len(s) {
			t.Fatalf("fields hold %d bytes of a %d-byte record", n, len(s))
		}
	})
}

// reRecord is the same grammar as ParseRecord, written with regexp, as
// the baseline of BenchmarkParseRecord.
var (
	reHead  = regexp.MustCompile(`^audit\((\d+)\.(\d{1,3}):(\d+)\): ?(.*)$`)
	reField = regexp.MustCompile(`([^ =]+)=("[^"]*"|[^ ]*)`)
)

func parseRegexp(text string) (Record, bool) {
	m := reHead.FindStringSubmatch(text)
	if m == nil {
		return Record{}, false
	}
	sec, _ := strconv.ParseInt(m[1], 10, 64)
	ms, _ := strconv.ParseInt(m[2], 10, 64)
	serial, _ := strconv.ParseUint(m[3], 10, 64)
	r := Record{Serial: serial, Millis: sec*1000 + ms}
	for _, f := range reField.FindAllStringSubmatch(m[4], maxFields) {
		v := f[2]
		if len(v) >= 2 && v[0] == '"' {
			v = v[1 : len(v)-1]
		}
		r.Fields = append(r.Fields, Field{f[1], v})
	}
	return r, true
}

func BenchmarkParseRecord(b *testing.B) {
	text := []byte(accessRec)
	b.Run("handwritten", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseRecord(TypeLandlockAccess, text); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("regexp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := parseRegexp(accessRec); !ok {
				b.Fatal("no match")
			}
		}
	})
}

// The regexp baseline agrees with the hand-written parser on the records
// the kernel writes, so the benchmark compares like with like.
func TestRegexpBaselineAgrees(t *testing.T) {
	for _, s := range []string{accessRec, domainRec, syscallRec} {
		a, err := ParseRecord(1, []byte(s))
		b, ok := parseRegexp(s)
		if err != nil || !ok || a.Serial != b.Serial || a.Millis != b.Millis || len(a.Fields) != len(b.Fields) {
			t.Fatalf("%q: %+v vs %+v", s, a, b)
		}
		for i := range a.Fields {
			if a.Fields[i] != b.Fields[i] {
				t.Fatalf("%q field %d: %v vs %v", s, i, a.Fields[i], b.Fields[i])
			}
		}
	}
}
