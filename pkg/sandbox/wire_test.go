package sandbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/bpf"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/palisade-sandbox/palisade/pkg/landlock"
)

// wireSpecs are specs as BuildSpec makes them, in every shape it has.
func wireSpecs(t testing.TB) map[string]*specs.Spec {
	t.Helper()
	base := SpecInput{
		Name: "sbx-0123456789ab", Kind: "task", Args: []string{"sh", "-c", "echo 'hi there'; exit 3"},
		Env: []string{"PATH=/usr/bin:/bin", "HOME=/work/x", "EMPTY="}, Workdir: "/work/x",
		UID: 10001, GID: 10002, Hostname: "sbx-0123456789ab", PolicySHA: strings.Repeat("ab", 32),
		Compat: "hard_requirement", Profile: ProfileDefault, HidePaths: []string{"/var/lib/palisade/state"},
	}
	out := map[string]*specs.Spec{}
	add := func(name string, mutate func(*SpecInput), after func(*specs.Spec)) {
		in := base
		if mutate != nil {
			mutate(&in)
		}
		s, err := BuildSpec(in)
		if err != nil {
			t.Fatalf("%s: BuildSpec: %v", name, err)
		}
		if after != nil {
			after(s)
		}
		out[name] = s
	}
	add("default", nil, nil)
	add("tty", func(in *SpecInput) { in.TTY = true }, func(s *specs.Spec) {
		s.Process.ConsoleSize = &specs.Box{Height: 48, Width: 160}
	})
	add("bounded-tmpfs", func(in *SpecInput) {
		in.Profile = ProfileBoundedTmpfs
		in.MemoryBytes, in.CPUs = BoundedMemory, BoundedCPUs
	}, nil)
	add("limits", func(in *SpecInput) {
		in.MemoryBytes, in.CPUs, in.PidsLimit, in.TmpSize = 512<<20, 1.5, 64, "1g"
		in.Compat = "best_effort"
	}, nil)
	add("unicode-and-empty", func(in *SpecInput) {
		in.Args = []string{"printf", "", "ünïcödé\x00\n"}
		in.Env = []string{}
		in.HidePaths = nil
	}, nil)
	return out
}

func TestWireSpecRoundTripMatchesJSON(t *testing.T) {
	for name, s := range wireSpecs(t) {
		t.Run(name, func(t *testing.T) {
			cfg := &InitConfig{Spec: s, Seccomp: true, Timing: true, StorageCheck: BoundedStoragePath,
				SeccompFilter: []bpf.RawInstruction{{Op: 0x20, K: 4}, {Op: 0x15, Jt: 1, Jf: 255, K: 0xc000003e}, {Op: 0x6, K: 0x7fff0000}},
				SeccompRules:  63,
				Landlock:      &landlock.Rules{ReadOnly: []string{"/usr", "/etc"}, ReadWrite: []string{"/work/x"}, HardRequirement: true}}
			got, err := decodeMessage(encodeMessage(Message{Type: MsgConfig, Config: cfg}))
			if err != nil {
				t.Fatal(err)
			}
			// JSON is the reference form: a field BuildSpec sets that the
			// codec drops shows up here.
			want, _ := json.Marshal(cfg)
			have, _ := json.Marshal(got.Config)
			if string(want) != string(have) {
				t.Fatalf("spec changed on the wire:\nwant %s\ngot  %s", want, have)
			}
			if !reflect.DeepEqual(cfg, got.Config) {
				t.Fatalf("config differs after the round trip (nil vs empty?):\nwant %#v\ngot  %#v", cfg, got.Config)
			}
		})
	}
}

func TestWireEveryMessageType(t *testing.T) {
	msgs := []Message{
		{Type: MsgGo},
		{Type: MsgPTY},
		{Type: MsgStarted, PID: 7},
		{Type: MsgExit, Code: 3},
		{Type: MsgExit, Signal: 9},
		{Type: MsgExit, Code: -1},
		{Type: MsgError, Stage: "exec", Code: ExitNotFound, Msg: "nope: executable file not found in PATH"},
		{Type: MsgLog, Level: "debug", Msg: "init timing: mounts=1us"},
		{Type: MsgConfig, Config: &InitConfig{}},
		{Type: MsgConfined, Confinement: &Confinement{
			Landlock: landlock.Result{ABI: 7, ReadOnly: 9, ReadWrite: 4, Scopes: "abstract_unix_socket,signal", Handled: "execute,write_file", Logging: "new_exec_on",
				Skipped: []landlock.Skip{{Path: "/opt/x", Access: "read_only", Reason: "no such file"}}, Enforced: true},
			Seccomp: true, SeccompRules: 63, Namespaces: []string{"mount", "pid"}, UID: 10001, GID: 10001, Mounts: 12,
		}},
		{Type: MsgConfined, Confinement: &Confinement{}},
	}
	for _, m := range msgs {
		got, err := decodeMessage(encodeMessage(m))
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if !reflect.DeepEqual(m, got) {
			t.Fatalf("round trip changed the message:\nwant %#v\ngot  %#v", m, got)
		}
	}
}

func TestWireRejectsCorruptMessages(t *testing.T) {
	cfg := &InitConfig{Spec: wireSpecs(t)["default"], Seccomp: true}
	good := encodeMessage(Message{Type: MsgConfig, Config: cfg})
	cases := map[string][]byte{
		"empty":         nil,
		"json":          []byte(`{"type":"go"}`),
		"other version": append([]byte{wireMagic, wireVersion + 1}, good[2:]...),
		"trailing":      append(append([]byte(nil), good...), 0),
		"bad flag":      append([]byte{wireMagic, wireVersion, 2, 'g', 'o', 0, 0, 0, 0, 0, 0}, 7, 0),
		"huge list":     {wireMagic, wireVersion, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f},
	}
	for i := 3; i < len(good); i += len(good) / 40 {
		cases["truncated at "+string(rune('a'+i%26))+strings.Repeat("'", i/26)] = good[:i]
	}
	for name, b := range cases {
		if m, err := decodeMessage(b); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, m)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, s := range wireSpecs(f) {
		f.Add(encodeMessage(Message{Type: MsgConfig, Config: &InitConfig{Spec: s, Landlock: &landlock.Rules{ReadOnly: []string{"/usr"}}}}))
	}
	f.Add(encodeMessage(Message{Type: MsgConfined, Confinement: &Confinement{Namespaces: []string{"pid"}}}))
	f.Add(encodeMessage(Message{Type: MsgExit, Code: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		// Whatever decodes must survive its own round trip unchanged.
		m2, err := decodeMessage(encodeMessage(m))
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the message:\n%#v\n%#v", m, m2)
		}
	})
}

func BenchmarkWireDecodeConfig(b *testing.B) {
	msg := encodeMessage(Message{Type: MsgConfig, Config: &InitConfig{Spec: wireSpecs(b)["default"], Seccomp: true}})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeMessage(msg); err != nil {
			b.Fatal(err)
		}
	}
}
