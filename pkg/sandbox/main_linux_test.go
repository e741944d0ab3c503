//go:build linux

package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

// The test binary doubles as the in-sandbox init and as the attacker that
// runs inside the sandbox, so the tests exercise the real code paths.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case InitCommand:
			// The init copy of the test binary: weakenInitEnv (set by a
			// wrapper script, see TestInitKillsACommandTheDropMissed)
			// weakens one step of the drop.
			weakenForTest = os.Getenv(weakenInitEnv)
			RunInit()
			return
		case "attack":
			res := map[string]string{}
			for _, name := range os.Args[2:] {
				fn, ok := attacks[name]
				if !ok {
					res[name] = "unknown attack"
					continue
				}
				res[name] = fn()
			}
			json.NewEncoder(os.Stdout).Encode(res)
			os.Exit(0)
		case "exit":
			var code int
			fmt.Sscan(os.Args[2], &code)
			os.Exit(code)
		}
		if fn, ok := helpers[os.Args[1]]; ok {
			os.Exit(fn(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}
