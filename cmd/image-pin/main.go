// Command image-pin keeps a worker's one sandbox-image pin
// (~/.mac/openshell/runtime-image-ref) and detects MAC_OPENSHELL_CREATE_ARGS
// --from arguments or MAC_HUB_VERIFY_IMAGE settings that disagree with it.
// See docs/image-pin.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/imagepin"
)

const usage = `Usage:
  image-pin show [--json]
  image-pin set REF@sha256:<digest> [--input-sha256 SHA]
  image-pin check [--json]
  image-pin env

The pin file is $MAC_OPENSHELL_RUNTIME_IMAGE_REF_FILE, or
~/.mac/openshell/runtime-image-ref when that is unset. It holds one image
reference with an @sha256 digest; a sidecar <pin>.json records the input
sha256 given to "set".

  show    print the pinned reference (--json: path, ref, digest, input sha)
  set     pin REF (must carry @sha256:<64 hex>), written atomically
  check   compare the --from in MAC_OPENSHELL_CREATE_ARGS with the pin
          (or with MAC_HUB_VERIFY_IMAGE on a host without a pin); exit 1
          with "OpenShell runtime image pins disagree: ..." when they differ
  env     print the mac.env line MAC_OPENSHELL_CREATE_ARGS=... with
          --from <pin> and the other current create args preserved

Every subcommand accepts --log-format text|json (logs go to stderr).
Exit status: 0 ok, 1 check failed / no pin / malformed input, 2 usage.

Examples:
  image-pin set "ghcr.io/mac/openshell-sandbox:2026.10@sha256:$DIGEST" \
      --input-sha256 "$INPUT_SHA256"
  image-pin show
  MAC_OPENSHELL_CREATE_ARGS="--from ghcr.io/x/y@sha256:... --upload /src:/src" image-pin check
  image-pin check --json | jq .gate_image
  image-pin env > /etc/mac/mac.env.d/openshell-image   # fleet update re-derives mac.env
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	cli.Exit("image-pin", err, os.Stderr)
}

// env is how run reads the environment; tests use t.Setenv.
var env imagepin.Env = os.LookupEnv

// now is the clock for the sidecar's set_at.
var now = time.Now

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if cli.IsVersion(args) {
		return cli.PrintVersion(stdout, "image-pin")
	}
	if len(args) == 0 {
		return cli.Usagef("missing subcommand (show, set, check, env); see image-pin --help")
	}
	sub, rest := args[0], args[1:]
	if sub == "-h" || sub == "--help" || sub == "-help" || sub == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	fs := flag.NewFlagSet("image-pin "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	var asJSON *bool
	var inputSHA *string
	switch sub {
	case "show", "check":
		asJSON = fs.Bool("json", false, "print JSON on stdout")
	case "set":
		inputSHA = fs.String("input-sha256", "", "sha256 (64 hex) of the published build input the image was made from")
	case "env":
	default:
		return cli.Usagef("unknown subcommand %q (want show, set, check or env); see image-pin --help", sub)
	}
	pos, err := cli.ParseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if err != nil {
		return cli.Usagef("%s: %v; see image-pin --help", sub, err)
	}
	log, err := cli.NewLogger(*logFormat, stderr, slog.LevelInfo)
	if err != nil {
		return err
	}
	wantPos := 0
	if sub == "set" {
		wantPos = 1
	}
	if len(pos) != wantPos {
		if sub == "set" {
			return cli.Usagef("set: want exactly one REF argument, got %d; see image-pin --help", len(pos))
		}
		return cli.Usagef("%s: unexpected argument %q; see image-pin --help", sub, pos[0])
	}
	path, err := imagepin.PinPath(env)
	if err != nil {
		return cli.WithCode(cli.ExitFailed, err)
	}

	switch sub {
	case "show":
		pin, err := imagepin.Read(path)
		if err != nil {
			return cli.WithCode(cli.ExitFailed, err)
		}
		if pin.SidecarProblem != "" {
			log.Warn(pin.SidecarProblem)
		}
		if *asJSON {
			return cli.WriteJSON(stdout, pin)
		}
		fmt.Fprintln(stdout, pin.Ref)
		return nil

	case "set":
		if _, err := imagepin.ParsePinnedRef(pos[0]); err != nil {
			return cli.Usagef("set REF: %v", err)
		}
		if *inputSHA != "" && !imagepin.ValidInputSHA256(*inputSHA) {
			return cli.Usagef("--input-sha256 %q: want 64 lowercase hex digits", *inputSHA)
		}
		pin, err := imagepin.Write(path, pos[0], *inputSHA, now())
		if err != nil {
			return cli.WithCode(cli.ExitFailed, err)
		}
		log.Info("pinned sandbox image", "path", pin.Path, "ref", pin.Ref, "input_sha256", pin.InputSHA256)
		if v, _ := env(imagepin.EnvCreateArgs); v != "" {
			log.Info(`re-derive mac.env so coding sandboxes use the new pin: image-pin env`)
		}
		return nil

	case "check":
		rep, err := imagepin.Check(env)
		for _, w := range rep.Warnings {
			log.Warn(w)
		}
		if *asJSON {
			if jerr := cli.WriteJSON(stdout, rep); jerr != nil {
				return jerr
			}
		}
		if err != nil {
			return cli.WithCode(cli.ExitFailed, err)
		}
		log.Info("sandbox image pins agree", "gate_image", rep.GateImage, "gate_source", rep.GateSource)
		return nil

	case "env":
		pin, err := imagepin.Read(path)
		if err != nil {
			return cli.WithCode(cli.ExitFailed, fmt.Errorf("env: nothing to derive from: %w", err))
		}
		if pin.SidecarProblem != "" {
			log.Warn(pin.SidecarProblem)
		}
		if v, _ := env(imagepin.EnvVerifyImage); v != "" {
			log.Warn(imagepin.EnvVerifyImage+" is ignored because a pin exists; remove it from mac.env", "pin", path)
		}
		existing, _ := env(imagepin.EnvCreateArgs)
		lines, err := imagepin.EnvLines(pin, existing)
		if err != nil {
			return cli.WithCode(cli.ExitFailed, err)
		}
		_, err = fmt.Fprintln(stdout, strings.Join(lines, "\n"))
		return err
	}
	return nil
}
