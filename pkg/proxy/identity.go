package proxy

// ForeignProcess is the process a foreign_code refusal rests on.
type ForeignProcess struct {
	PID  int
	Exe  string
	Code ForeignCode
}

// foreign returns the first process of the identity (the caller, then
// its ancestors nearest first) that lost its binary's identity, nil
// when none did.
func (id *Identity) foreign() *ForeignProcess {
	if id == nil {
		return nil
	}
	if id.Code != nil {
		return &ForeignProcess{PID: id.PID, Exe: id.Exe, Code: *id.Code}
	}
	for _, a := range id.Ancestors {
		if a.Code != nil {
			return &ForeignProcess{PID: a.PID, Exe: a.Exe, Code: *a.Code}
		}
	}
	return nil
}
