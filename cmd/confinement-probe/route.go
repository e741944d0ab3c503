package main

import (
	"context"
	"io"

	"github.com/palisade-sandbox/palisade/pkg/cli"
)

func routeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Usagef("route: not implemented yet")
}
