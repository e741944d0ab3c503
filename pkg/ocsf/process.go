package ocsf

import (
	"fmt"
	"syscall"
)

// ProcessLaunch is a Process Activity (1007) Launch: actor (the sandbox
// init or supervisor) started proc inside the sandbox.
func (s *Source) ProcessLaunch(proc Process, actor Actor) *ProcessActivity {
	e := &ProcessActivity{
		Base:    s.Base(ClassProcessActivity, ProcessLaunch, SeverityInformational),
		Actor:   actor,
		Process: proc,
	}
	if e.Process.Sandbox == "" {
		e.Process.Sandbox = s.Sandbox
	}
	if e.Process.CreatedTime == 0 {
		e.Process.CreatedTime = e.Time
	}
	e.StatusID = StatusSuccess
	e.Message = fmt.Sprintf("launched %s (pid %d) in sandbox %s", procName(&e.Process), e.Process.PID, s.Sandbox)
	return e
}

// Exit is how a process ended: Code is the exit status the supervisor
// reports (128+N for signal N), Signal the terminating signal or 0.
type Exit struct {
	Code   int
	Signal int
}

// ProcessTerminate is a Process Activity (1007) Terminate with the exit
// code. status is Success for exit 0, Failure otherwise; a signal death is
// named in status_detail.
func (s *Source) ProcessTerminate(proc Process, actor Actor, exit Exit) *ProcessActivity {
	e := &ProcessActivity{
		Base:    s.Base(ClassProcessActivity, ProcessTerminate, SeverityInformational),
		Actor:   actor,
		Process: proc,
	}
	if e.Process.Sandbox == "" {
		e.Process.Sandbox = s.Sandbox
	}
	e.Process.TerminatedTime = e.Time
	code := exit.Code
	e.ExitCode = &code
	e.StatusID = StatusSuccess
	e.StatusCode = fmt.Sprint(code)
	if code != 0 || exit.Signal != 0 {
		e.StatusID = StatusFailure
	}
	if exit.Signal != 0 {
		e.StatusDetail = fmt.Sprintf("killed by signal %d (%s)", exit.Signal, syscall.Signal(exit.Signal))
	}
	e.Message = fmt.Sprintf("%s (pid %d) exited with status %d", procName(&e.Process), e.Process.PID, code)
	return e
}

func procName(p *Process) string {
	switch {
	case p.Name != "":
		return p.Name
	case p.File != nil && p.File.Name != "":
		return p.File.Name
	}
	return "process"
}
