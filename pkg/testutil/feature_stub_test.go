package testutil

import (
	"errors"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

func init() {
	feature.Register(&feature.Probe{Name: "test:never", MinKernel: "99.0", Check: func() error {
		return errors.New("this probe never passes")
	}})
	feature.Register(&feature.Probe{Name: "test:other-layout", HostShape: true, Check: func() error {
		return errors.New("this host has another layout")
	}})
}
