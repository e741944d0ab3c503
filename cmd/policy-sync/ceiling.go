package main

import (
	"errors"
	"flag"

	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// ceilingFlag declares --ceiling on a subcommand.
func ceilingFlag(fs *flag.FlagSet) *string {
	return fs.String("ceiling", "", "policy ceiling every policy must lie within (default $"+ceiling.EnvPath+", else "+ceiling.DefaultPath+" when it exists)")
}

// ceilingCheck loads the ceiling (--ceiling, $PALISADE_CEILING_FILE or
// the default) and checks p against it; nil when there is none or p is
// within it.
func (a *app) ceilingCheck(flagValue string, p *policy.Policy) error {
	c, err := ceiling.Find(flagValue, a.getenv)
	if err != nil {
		return err
	}
	return c.Check(p)
}

// ceilingChecker is ceilingCheck as a function loading the ceiling afresh
// on every call (watch, expand).
func (a *app) ceilingChecker(flagValue string) func(*policy.Policy) error {
	return ceiling.Checker(ceiling.Locate(flagValue, a.getenv))
}

// ceilingProblems turns a ceiling refusal into check's problems; ok is
// false for any other error.
func ceilingProblems(err error) ([]*policy.FieldError, bool) {
	var ce *ceiling.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	out := make([]*policy.FieldError, len(ce.Excesses))
	for i, x := range ce.Excesses {
		out[i] = &policy.FieldError{Path: x.Field, Msg: x.Msg + " (ceiling " + ce.Ceiling + ")"}
	}
	return out, true
}
