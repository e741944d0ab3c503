package policies

import (
	"bytes"
	"os"
	"testing"
)

func TestEmbeddedFilesMatchDisk(t *testing.T) {
	for name, embedded := range map[string][]byte{
		DefaultPolicyFile:     DefaultPolicy,
		MacHermesTemplateFile: MacHermesTemplate,
	} {
		disk, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(embedded) == 0 || !bytes.Equal(disk, embedded) {
			t.Errorf("%s: embedded copy (%d bytes) differs from disk (%d bytes)", name, len(embedded), len(disk))
		}
		if !bytes.Contains(embedded, []byte("version: 1\n")) {
			t.Errorf("%s does not declare version: 1", name)
		}
	}
}
