package caps

import (
	"strings"
	"testing"
)

const confined = `Name:	sh
Uid:	10001	10001	10001	10001
Gid:	10001	10001	10001	10001
Groups:	
CapInh:	0000000000000000
CapPrm:	0000000000000000
CapEff:	0000000000000000
CapBnd:	0000000000000000
CapAmb:	0000000000000000
NoNewPrivs:	1
Seccomp:	2
`

func TestVerifyConfined(t *testing.T) {
	s, err := ParseStatus(confined)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(s, Expect{UID: 10001, GID: 10001, Seccomp: true}); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyCatchesEachWeakness(t *testing.T) {
	cases := map[string]struct{ from, to, want string }{
		"saved uid":  {"Uid:	10001	10001	10001	10001", "Uid:	10001	10001	0	10001", "uid[2]=0"},
		"gid":        {"Gid:	10001	10001	10001	10001", "Gid:	0	10001	10001	10001", "gid[0]=0"},
		"groups":     {"Groups:	", "Groups:	27", "supplementary groups"},
		"bounding":   {"CapBnd:	0000000000000000", "CapBnd:	0000000000200000", "CapBnd"},
		"inherit":    {"CapInh:	0000000000000000", "CapInh:	0000000000000001", "CapInh"},
		"ambient":    {"CapAmb:	0000000000000000", "CapAmb:	0000000000000400", "CapAmb"},
		"effective":  {"CapEff:	0000000000000000", "CapEff:	000001ffffffffff", "CapEff"},
		"permitted":  {"CapPrm:	0000000000000000", "CapPrm:	0000000000000080", "CapPrm"},
		"nnp":        {"NoNewPrivs:	1", "NoNewPrivs:	0", "NoNewPrivs"},
		"no seccomp": {"Seccomp:	2", "Seccomp:	0", "Seccomp"},
	}
	for name, c := range cases {
		s, err := ParseStatus(strings.Replace(confined, c.from, c.to, 1))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = Verify(s, Expect{UID: 10001, GID: 10001, Seccomp: true})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Verify = %v, want error mentioning %q", name, err, c.want)
		}
	}
	s, _ := ParseStatus(strings.ReplaceAll(confined, "10001", "0"))
	if err := Verify(s, Expect{UID: 0, GID: 0}); err == nil {
		t.Error("root target identity accepted")
	}
}

func TestParseStatusRejectsTruncated(t *testing.T) {
	if _, err := ParseStatus("Name:\tsh\nUid:\t1 1 1 1\n"); err == nil {
		t.Fatal("truncated status accepted")
	}
}
