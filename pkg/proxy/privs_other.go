//go:build !linux

package proxy

import "github.com/palisade-sandbox/palisade/pkg/feature"

// KeepCapabilities is empty off Linux.
var KeepCapabilities []int

// ErrCapsCgo exists for symmetry with Linux.
var ErrCapsCgo = feature.ErrNotSupported

// DropCapabilities is not supported off Linux.
func DropCapabilities([]int) error { return feature.ErrNotSupported }

// NoCoreDumps is not supported off Linux.
func NoCoreDumps() error { return feature.ErrNotSupported }
