//go:build !linux

// Package nsthread runs a function on an OS thread that has entered a
// network namespace (Linux only).
package nsthread
