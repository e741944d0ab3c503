package actionevent

import "strings"

// Decoding of the OCSF attributes the mapping reads, with decoder. Each
// function consumes exactly one JSON value; unknown keys are validated and
// skipped. The loops are written out (rather than taking callbacks) so
// that decoding a line allocates only the strings and objects it keeps.

func decodeEvent(d *decoder, ev *ocsfEvent) error {
	ok, err := d.objStart()
	if err != nil {
		if de, isType := err.(*decodeError); isType {
			de.reason = "not a JSON object (" + de.reason + ")"
		}
		return err
	}
	if !ok {
		return &decodeError{reason: "not a JSON object (null)"}
	}
	for n := 0; ; n++ {
		key, more, err := d.objNext(n)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if err := ev.decodeField(d, key); err != nil {
			return inField(key, err)
		}
	}
	return d.end()
}

func (ev *ocsfEvent) decodeField(d *decoder, key []byte) error {
	var err error
	switch string(key) {
	case "class_uid":
		var v int
		var ok bool
		if v, ok, err = d.intN(); ok {
			ev.ClassUID = &v
		}
	case "class_name":
		ev.ClassName, err = d.str()
	case "activity_id":
		ev.ActivityID, _, err = d.intN()
	case "activity_name":
		ev.ActivityName, err = d.str()
	case "time":
		var v int64
		var ok bool
		if v, ok, err = d.int(); ok {
			ev.Time = &v
		}
	case "time_dt":
		ev.TimeDT, err = d.str()
	case "action_id":
		ev.ActionID, _, err = d.intN()
	case "action":
		ev.Action, err = d.str()
	case "disposition_id":
		ev.DispositionID, _, err = d.intN()
	case "severity_id":
		var v int
		var ok bool
		if v, ok, err = d.intN(); ok {
			ev.SeverityID = &v
		}
	case "severity":
		ev.Severity, err = d.str()
	case "status_detail":
		ev.StatusDetail, err = d.str()
	case "status_code":
		ev.StatusCode, err = d.str()
	case "message":
		ev.Message, err = d.str()
	case "metadata":
		err = decodeMetadata(d, ev)
	case "actor":
		err = decodeActor(d, &ev.Actor)
	case "process":
		ev.Process, err = decodeProcess(d)
	case "dst_endpoint":
		ev.DstEndpoint, err = decodeEndpoint(d)
	case "url":
		ev.URL, err = decodeURL(d)
	case "http_request":
		ev.HTTPRequest, err = decodeHTTPRequest(d)
	case "firewall_rule":
		ev.Rule, err = decodeRule(d)
	case "policy":
		ev.Policy, err = decodePolicy(d)
	case "finding_info":
		err = decodeFindingInfo(d, ev)
	case "evidences":
		err = decodeEvidences(d, ev)
	case "device":
		err = decodeDevice(d, ev)
	case "unmapped":
		err = decodeUnmapped(d, ev)
	default:
		err = d.skip()
	}
	return err
}

func decodeMetadata(d *decoder, ev *ocsfEvent) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil || !more {
			return err
		}
		switch string(k) {
		case "uid":
			ev.Metadata.UID, err = d.str()
		case "labels":
			err = decodeLabels(d, ev)
		default:
			err = d.skip()
		}
		if err != nil {
			return inField(k, err)
		}
	}
}

// decodeLabels keeps the agent id from an "agent:<id>" label.
func decodeLabels(d *decoder, ev *ocsfEvent) error {
	ok, err := d.arrStart()
	if err != nil || !ok {
		return err
	}
	for i := 0; ; i++ {
		more, err := d.arrNext(i)
		if err != nil || !more {
			return err
		}
		l, err := d.str()
		if err != nil {
			return inIndex(i, err)
		}
		if a, ok := strings.CutPrefix(l, "agent:"); ok {
			ev.Metadata.LabelAgent = a
		}
	}
}

func decodeActor(d *decoder, a *ocsfActor) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil || !more {
			return err
		}
		if string(k) == "process" {
			a.Process, err = decodeProcess(d)
		} else {
			err = d.skip()
		}
		if err != nil {
			return inField(k, err)
		}
	}
}

func decodeProcess(d *decoder) (*ocsfProcess, error) {
	ok, err := d.objStart()
	if err != nil || !ok {
		return nil, err
	}
	p := new(ocsfProcess)
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return nil, err
		}
		if !more {
			return p, nil
		}
		switch string(k) {
		case "pid":
			p.PID, _, err = d.int()
		case "name":
			p.Name, err = d.str()
		case "path":
			p.Path, err = d.str()
		case "sandbox":
			p.Sandbox, err = d.str()
		case "file":
			p.File, err = decodeFile(d)
		default:
			err = d.skip()
		}
		if err != nil {
			return nil, inField(k, err)
		}
	}
}

func decodeFile(d *decoder) (*ocsfFile, error) {
	ok, err := d.objStart()
	if err != nil || !ok {
		return nil, err
	}
	f := new(ocsfFile)
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return nil, err
		}
		if !more {
			return f, nil
		}
		switch string(k) {
		case "path":
			f.Path, err = d.str()
		case "hashes":
			err = decodeHashes(d, f)
		default:
			err = d.skip()
		}
		if err != nil {
			return nil, inField(k, err)
		}
	}
}

func decodeHashes(d *decoder, f *ocsfFile) error {
	ok, err := d.arrStart()
	if err != nil || !ok {
		return err
	}
	for i := 0; ; i++ {
		more, err := d.arrNext(i)
		if err != nil || !more {
			return err
		}
		if err := decodeHash(d, f); err != nil {
			return inIndex(i, err)
		}
	}
}

func decodeHash(d *decoder, f *ocsfFile) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	var h ocsfHash
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return err
		}
		if !more {
			f.Hashes = append(f.Hashes, h)
			return nil
		}
		switch string(k) {
		case "algorithm_id":
			h.AlgorithmID, _, err = d.intN()
		case "algorithm":
			h.Algorithm, err = d.str()
		case "value":
			h.Value, err = d.str()
		default:
			err = d.skip()
		}
		if err != nil {
			return inField(k, err)
		}
	}
}

func decodeEndpoint(d *decoder) (*ocsfEndpoint, error) {
	ok, err := d.objStart()
	if err != nil || !ok {
		return nil, err
	}
	e := new(ocsfEndpoint)
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return nil, err
		}
		if !more {
			return e, nil
		}
		switch string(k) {
		case "hostname":
			e.Hostname, err = d.str()
		case "domain":
			e.Domain, err = d.str()
		case "ip":
			e.IP, err = d.str()
		case "port":
			e.Port, _, err = d.intN()
		default:
			err = d.skip()
		}
		if err != nil {
			return nil, inField(k, err)
		}
	}
}

func decodeURL(d *decoder) (*ocsfURL, error) {
	ok, err := d.objStart()
	if err != nil || !ok {
		return nil, err
	}
	u := new(ocsfURL)
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return nil, err
		}
		if !more {
			return u, nil
		}
		switch string(k) {
		case "hostname":
			u.Hostname, err = d.str()
		case "port":
			u.Port, _, err = d.intN()
		case "path":
			u.Path, err = d.str()
		case "url_string":
			u.URLString, err = d.str()
		default:
			err = d.skip()
		}
		if err != nil {
			return nil, inField(k, err)
		}
	}
}

func decodeHTTPRequest(d *decoder) (*ocsfHTTPRequest, error) {
	ok, err := d.objStart()
	if err != nil || !ok {
		return nil, err
	}
	r := new(ocsfHTTPRequest)
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return nil, err
		}
		if !more {
			return r, nil
		}
		switch string(k) {
		case "http_method":
			r.HTTPMethod, err = d.str()
		case "url":
			r.URL, err = decodeURL(d)
		default:
			err = d.skip()
		}
		if err != nil {
			return nil, inField(k, err)
		}
	}
}

func decodeRule(d *decoder) (*ocsfRule, error) {
	ok, err := d.objStart()
	if err != nil || !ok {
		return nil, err
	}
	r := new(ocsfRule)
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return nil, err
		}
		if !more {
			return r, nil
		}
		switch string(k) {
		case "name":
			r.Name, err = d.str()
		case "uid":
			r.UID, err = d.str()
		case "version":
			r.Version, err = d.str()
		case "desc":
			r.Desc, err = d.str()
		default:
			err = d.skip()
		}
		if err != nil {
			return nil, inField(k, err)
		}
	}
}

func decodePolicy(d *decoder) (*ocsfPolicy, error) {
	ok, err := d.objStart()
	if err != nil || !ok {
		return nil, err
	}
	p := new(ocsfPolicy)
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return nil, err
		}
		if !more {
			return p, nil
		}
		switch string(k) {
		case "name":
			p.Name, err = d.str()
		case "uid":
			p.UID, err = d.str()
		default:
			err = d.skip()
		}
		if err != nil {
			return nil, inField(k, err)
		}
	}
}

func decodeFindingInfo(d *decoder, ev *ocsfEvent) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	fi := new(ocsfFindingInfo)
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return err
		}
		if !more {
			ev.FindingInfo = fi
			return nil
		}
		if string(k) == "title" {
			fi.Title, err = d.str()
		} else {
			err = d.skip()
		}
		if err != nil {
			return inField(k, err)
		}
	}
}

func decodeEvidences(d *decoder, ev *ocsfEvent) error {
	ok, err := d.arrStart()
	if err != nil || !ok {
		return err
	}
	for i := 0; ; i++ {
		more, err := d.arrNext(i)
		if err != nil || !more {
			return err
		}
		if err := decodeEvidence(d, ev); err != nil {
			return inIndex(i, err)
		}
	}
}

func decodeEvidence(d *decoder, ev *ocsfEvent) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	var e ocsfEvidence
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil {
			return err
		}
		if !more {
			ev.Evidences = append(ev.Evidences, e)
			return nil
		}
		switch string(k) {
		case "actor":
			e.Actor = new(ocsfActor)
			err = decodeActor(d, e.Actor)
		case "process":
			e.Process, err = decodeProcess(d)
		case "dst_endpoint":
			e.DstEndpoint, err = decodeEndpoint(d)
		case "url":
			e.URL, err = decodeURL(d)
		case "http_request":
			e.HTTPRequest, err = decodeHTTPRequest(d)
		default:
			err = d.skip()
		}
		if err != nil {
			return inField(k, err)
		}
	}
}

func decodeDevice(d *decoder, ev *ocsfEvent) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil || !more {
			return err
		}
		if string(k) == "container" {
			err = decodeContainer(d, ev)
		} else {
			err = d.skip()
		}
		if err != nil {
			return inField(k, err)
		}
	}
}

func decodeContainer(d *decoder, ev *ocsfEvent) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil || !more {
			return err
		}
		if string(k) == "name" {
			ev.ContainerName, err = d.str()
		} else {
			err = d.skip()
		}
		if err != nil {
			return inField(k, err)
		}
	}
}

func decodeUnmapped(d *decoder, ev *ocsfEvent) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	for n := 0; ; n++ {
		k, more, err := d.objNext(n)
		if err != nil || !more {
			return err
		}
		switch string(k) {
		case "sandbox_id":
			ev.Unmapped.SandboxID, err = d.str()
		case "policy_name":
			ev.Unmapped.PolicyName, err = d.str()
		case "policy_checksum":
			ev.Unmapped.PolicyChecksum, err = d.str()
		case "policy_sha256":
			ev.Unmapped.PolicySHA256, err = d.str()
		default:
			err = d.skip()
		}
		if err != nil {
			return inField(k, err)
		}
	}
}
