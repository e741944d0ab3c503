package sandbox

// Events receives what a sandbox does, in order. The supervisor turns
// each call into an OCSF event; tests record them. Implementations must
// be safe for use from one goroutine at a time (the supervisor calls them
// sequentially).
type Events interface {
	// Created: the sandbox has its name (called before any other event
	// except a preflight Failed).
	Created(name string, kind string)
	// PolicyLoaded: the policy the sandbox is created from.
	PolicyLoaded(p PolicyInfo)
	// Degraded: a confinement layer is missing or weakened and the run
	// goes on because the policy or an explicit operator flag allows it.
	Degraded(feature, detail string, optIn string)
	// Confined: the init applied its confinement.
	Confined(c Confinement, cgroup string)
	// Launched: the command started (pid inside the sandbox).
	Launched(pid int, args []string, uid, gid uint32)
	// Exited: the command ended.
	Exited(pid int, code, signal int)
	// Failed: the sandbox could not be created or confined.
	Failed(stage, msg string, code int)
	// Incident: something security-relevant happened to a running
	// sandbox's infrastructure (for example its egress proxy died and
	// egress is failing closed). kind is a short stable identifier.
	Incident(kind, title, detail string)
}

// NopEvents discards every event.
type NopEvents struct{}

func (NopEvents) Created(string, string)                 {}
func (NopEvents) PolicyLoaded(PolicyInfo)                {}
func (NopEvents) Degraded(string, string, string)        {}
func (NopEvents) Confined(Confinement, string)           {}
func (NopEvents) Launched(int, []string, uint32, uint32) {}
func (NopEvents) Exited(int, int, int)                   {}
func (NopEvents) Failed(string, string, int)             {}
func (NopEvents) Incident(string, string, string)        {}

// PolicyInfo is the part of the resolved policy the sandbox uses.
type PolicyInfo struct {
	SHA256          string   `json:"sha256"`
	Source          string   `json:"source"` // flag | env | home | bundled
	Path            string   `json:"path,omitempty"`
	Reason          string   `json:"reason,omitempty"`
	ReadOnly        []string `json:"read_only"`
	ReadWrite       []string `json:"read_write"`
	IncludeWorkdir  bool     `json:"include_workdir"`
	HardRequirement bool     `json:"hard_requirement"`
	RunAsUser       string   `json:"run_as_user"`
	RunAsGroup      string   `json:"run_as_group"`
	NetworkPolicies int      `json:"network_policies"`
}
