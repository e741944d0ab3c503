package main

import (
	"io"
	"runtime/debug"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
)

// openEvents opens the --events destination ("" drops events, "-" is
// stdout) and returns the emitter and its closer.
func openEvents(spec string, stdout io.Writer) (ocsf.Emitter, func() error, error) {
	if spec == "" {
		return ocsf.Nowhere, func() error { return nil }, nil
	}
	w, err := ocsf.OpenDest(spec, stdout)
	if err != nil {
		return nil, nil, err
	}
	return w, w.Close, nil
}

func newEventSink(emit ocsf.Emitter, agentID string, args []string) *sandbox.OCSFEvents {
	return sandbox.NewOCSFEvents(emit, agentID, version(), args)
}

// version is the module version the binary was built from.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
