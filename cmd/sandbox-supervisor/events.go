package main

import (
	"io"
	"runtime/debug"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
)

// openEvents opens the --events destination ("" drops events, "-" is
// stdout) and returns the emitter and its closer. claimed, when not nil,
// is the destination already opened by claimEvents.
func openEvents(spec string, stdout io.Writer, claimed *ocsf.Writer) (ocsf.Emitter, func() error, error) {
	if claimed != nil {
		return claimed, claimed.Close, nil
	}
	if spec == "" {
		return ocsf.Nowhere, func() error { return nil }, nil
	}
	w, err := ocsf.OpenDest(spec, stdout)
	if err != nil {
		return nil, nil, err
	}
	return w, w.Close, nil
}

// claimEvents takes an --events /dev/fd/N descriptor before this process
// opens any descriptor of its own: later, N could be one of the
// supervisor's pipes or sockets rather than what the caller passed. It
// returns nil for any other destination.
func claimEvents(spec string) (*ocsf.Writer, error) {
	fd, ok := ocsf.FDDest(spec)
	if !ok {
		return nil, nil
	}
	return ocsf.OpenFD(spec, fd)
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
