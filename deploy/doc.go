// Package deploy holds no code: it is the home of the tests of the
// systemd units in systemd/ (each passes systemd-analyze verify against
// a root with the binaries installed) and of bootstrap.sh (dry run, a
// DESTDIR root, refusal to enable on a failing confinement probe,
// idempotence and rollback).
package deploy
