package imagepin

import (
	"errors"
	"fmt"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/shellwords"
)

// DisagreeMessage starts every disagreement error, exactly as seed 000
// names it.
const DisagreeMessage = "OpenShell runtime image pins disagree"

// fixHint is the remedy every disagreement carries.
const fixHint = `fix: choose the intended image and run "image-pin set REF@sha256:<digest>", then re-derive mac.env with "image-pin env"`

// DisagreeError reports that the coding-sandbox image and the gate image
// differ, or cannot be told apart.
type DisagreeError struct{ Detail string }

func (e *DisagreeError) Error() string {
	return DisagreeMessage + ": " + e.Detail + "; " + fixHint
}

// FromArgs returns the values of every --from in args, in both the
// "--from X" and "--from=X" forms, and args without them. Scanning stops at
// "--": what follows is the sandbox command, not create options. A --from
// with no value is an error.
func FromArgs(args []string) (froms, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return froms, append(rest, args[i:]...), nil
		case a == "--from":
			if i+1 >= len(args) || args[i+1] == "--" {
				return nil, nil, fmt.Errorf("%s: --from has no value", EnvCreateArgs)
			}
			froms = append(froms, args[i+1])
			i++
		case strings.HasPrefix(a, "--from="):
			v := strings.TrimPrefix(a, "--from=")
			if v == "" {
				return nil, nil, fmt.Errorf("%s: --from= has an empty value", EnvCreateArgs)
			}
			froms = append(froms, v)
		default:
			rest = append(rest, a)
		}
	}
	return froms, rest, nil
}

// SplitCreateArgs shell-splits MAC_OPENSHELL_CREATE_ARGS.
func SplitCreateArgs(v string) ([]string, error) {
	args, err := shellwords.Split(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvCreateArgs, err)
	}
	return args, nil
}

// Report is what Check found. Fields are empty when not applicable.
type Report struct {
	OK          bool     `json:"ok"`
	PinPath     string   `json:"pin_path"`
	Pin         *Pin     `json:"pin,omitempty"`
	From        []string `json:"from"`
	VerifyImage string   `json:"verify_image,omitempty"`
	// GateImage is the image the repository test gate runs, and GateSource
	// where it came from: "runtime-image-ref" or "MAC_HUB_VERIFY_IMAGE".
	GateImage  string   `json:"gate_image,omitempty"`
	GateSource string   `json:"gate_source,omitempty"`
	Warnings   []string `json:"warnings"`
	Error      string   `json:"error,omitempty"`
}

// Check compares the coding-sandbox image (the --from in
// MAC_OPENSHELL_CREATE_ARGS) with the gate image (the pin, or
// MAC_HUB_VERIFY_IMAGE where no pin exists). It returns the report and, when
// the check fails, an error that the report's Error repeats:
//
//   - a pin exists: exactly one --from, equal to the pin byte for byte, is
//     required; a missing, different or repeated --from is a *DisagreeError.
//     MAC_HUB_VERIFY_IMAGE is ignored, with a warning.
//   - no pin, MAC_HUB_VERIFY_IMAGE set (a valid reference): it is the gate
//     image; a --from that differs from it, or more than one --from, is a
//     *DisagreeError; no --from is fine (a host such as the hub).
//   - no pin and no MAC_HUB_VERIFY_IMAGE: the gate has no image, which is
//     an error wrapping ErrNoPin whatever --from says.
//   - an unreadable or malformed pin, or unsplittable create args: error.
func Check(env Env) (*Report, error) {
	rep := &Report{From: []string{}, Warnings: []string{}}
	fail := func(err error) (*Report, error) {
		rep.OK = false
		rep.Error = err.Error()
		return rep, err
	}
	path, err := PinPath(env)
	if err != nil {
		return fail(err)
	}
	rep.PinPath = path
	args, err := SplitCreateArgs(get(env, EnvCreateArgs))
	if err != nil {
		return fail(err)
	}
	froms, _, err := FromArgs(args)
	if err != nil {
		return fail(err)
	}
	rep.From = append(rep.From, froms...)
	rep.VerifyImage = get(env, EnvVerifyImage)

	pin, err := Read(path)
	switch {
	case err == nil:
		rep.Pin = pin
		rep.GateImage, rep.GateSource = pin.Ref, "runtime-image-ref"
		if pin.SidecarProblem != "" {
			rep.Warnings = append(rep.Warnings, pin.SidecarProblem)
		}
		if rep.VerifyImage != "" {
			w := fmt.Sprintf("%s is ignored because the pin %s exists", EnvVerifyImage, path)
			if rep.VerifyImage != pin.Ref {
				w += fmt.Sprintf(" (it names %s, the pin %s); remove it from mac.env", rep.VerifyImage, pin.Ref)
			} else {
				w += "; remove it from mac.env"
			}
			rep.Warnings = append(rep.Warnings, w)
		}
		switch len(froms) {
		case 0:
			return fail(&DisagreeError{fmt.Sprintf("the pin %s is %s but %s has no --from, so coding sandboxes would run OpenShell's default image", path, pin.Ref, EnvCreateArgs)})
		case 1:
			if froms[0] != pin.Ref {
				return fail(&DisagreeError{fmt.Sprintf("%s has --from %s but the pin %s is %s", EnvCreateArgs, froms[0], path, pin.Ref)})
			}
		default:
			return fail(&DisagreeError{fmt.Sprintf("%s has %d --from arguments (%s) and the pin %s is %s; exactly one --from is allowed", EnvCreateArgs, len(froms), strings.Join(froms, ", "), path, pin.Ref)})
		}
	case errors.Is(err, ErrNoPin):
		if rep.VerifyImage == "" {
			return fail(fmt.Errorf("%w: %s does not exist and %s is unset, so the test gate has no image; pin one with \"image-pin set REF@sha256:<digest>\"", ErrNoPin, path, EnvVerifyImage))
		}
		if _, perr := ParseRef(rep.VerifyImage); perr != nil {
			return fail(fmt.Errorf("%s: %w", EnvVerifyImage, perr))
		}
		rep.GateImage, rep.GateSource = rep.VerifyImage, EnvVerifyImage
		switch {
		case len(froms) > 1:
			return fail(&DisagreeError{fmt.Sprintf("%s has %d --from arguments (%s); exactly one --from is allowed", EnvCreateArgs, len(froms), strings.Join(froms, ", "))})
		case len(froms) == 1 && froms[0] != rep.VerifyImage:
			return fail(&DisagreeError{fmt.Sprintf("%s has --from %s but %s (no pin at %s) is %s", EnvCreateArgs, froms[0], EnvVerifyImage, path, rep.VerifyImage)})
		}
	default:
		return fail(err)
	}
	rep.OK = true
	return rep, nil
}

// DeriveCreateArgs returns MAC_OPENSHELL_CREATE_ARGS with its --from
// replaced by pinRef: "--from <pin>" first, then every other existing
// argument in its original order (every --from and --from= is dropped).
func DeriveCreateArgs(existing, pinRef string) ([]string, error) {
	args, err := SplitCreateArgs(existing)
	if err != nil {
		return nil, err
	}
	_, rest, err := FromArgs(args)
	if err != nil {
		return nil, err
	}
	return append([]string{"--from", pinRef}, rest...), nil
}

// EnvLines returns the mac.env lines derived from the pin, in POSIX sh
// syntax: MAC_OPENSHELL_CREATE_ARGS holding DeriveCreateArgs, each argument
// quoted inside the value and the whole value quoted again, so that
// sourcing the line and shell-splitting the variable yields the arguments.
func EnvLines(pin *Pin, existingCreateArgs string) ([]string, error) {
	args, err := DeriveCreateArgs(existingCreateArgs, pin.Ref)
	if err != nil {
		return nil, err
	}
	return []string{EnvCreateArgs + "=" + shellwords.Quote(shellwords.Join(args))}, nil
}
