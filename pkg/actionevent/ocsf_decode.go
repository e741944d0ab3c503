package actionevent

// Decoding of the OCSF attributes the mapping reads, with decoder. Each
// function consumes exactly one JSON value; unknown keys are validated and
// skipped.

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
	case "message":
		ev.Message, err = d.str()
	case "metadata":
		err = decodeObject(d, func(k []byte) error {
			if string(k) == "uid" {
				var e error
				ev.Metadata.UID, e = d.str()
				return e
			}
			return d.skip()
		})
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
		err = decodeObject(d, func(k []byte) error {
			if ev.Policy == nil {
				ev.Policy = new(ocsfPolicy)
			}
			var e error
			switch string(k) {
			case "name":
				ev.Policy.Name, e = d.str()
			case "uid":
				ev.Policy.UID, e = d.str()
			default:
				e = d.skip()
			}
			return e
		})
	case "status_code":
		ev.StatusCode, err = d.str()
	case "finding_info":
		var title string
		present := false
		err = decodeObject(d, func(k []byte) error {
			present = true
			if string(k) == "title" {
				var e error
				title, e = d.str()
				return e
			}
			return d.skip()
		})
		if present {
			ev.FindingInfo = &struct {
				Title string `json:"title"`
			}{title}
		}
	case "evidences":
		err = decodeArray(d, func() error {
			var e ocsfEvidence
			err := decodeObject(d, func(k []byte) error {
				var err error
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
				return err
			})
			ev.Evidences = append(ev.Evidences, e)
			return err
		})
	case "device":
		err = decodeObject(d, func(k []byte) error {
			if string(k) != "container" {
				return d.skip()
			}
			return decodeObject(d, func(k []byte) error {
				if string(k) != "name" {
					return d.skip()
				}
				name, err := d.str()
				if ev.Device == nil {
					ev.Device = new(struct {
						Container *struct {
							Name string `json:"name"`
						} `json:"container"`
					})
				}
				ev.Device.Container = &struct {
					Name string `json:"name"`
				}{name}
				return err
			})
		})
	case "unmapped":
		err = decodeObject(d, func(k []byte) error {
			var e error
			if ev.Unmapped == nil {
				ev.Unmapped = new(struct {
					SandboxID      string `json:"sandbox_id"`
					PolicyName     string `json:"policy_name"`
					PolicyChecksum string `json:"policy_checksum"`
					PolicySHA256   string `json:"policy_sha256"`
				})
			}
			switch string(k) {
			case "sandbox_id":
				ev.Unmapped.SandboxID, e = d.str()
			case "policy_name":
				ev.Unmapped.PolicyName, e = d.str()
			case "policy_checksum":
				ev.Unmapped.PolicyChecksum, e = d.str()
			case "policy_sha256":
				ev.Unmapped.PolicySHA256, e = d.str()
			default:
				e = d.skip()
			}
			return e
		})
	default:
		err = d.skip()
	}
	return err
}

// decodeObject calls fn for each key of an object (fn consumes the
// value); null is an absent object.
func decodeObject(d *decoder, fn func(key []byte) error) error {
	ok, err := d.objStart()
	if err != nil || !ok {
		return err
	}
	for n := 0; ; n++ {
		key, more, err := d.objNext(n)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
		if err := fn(key); err != nil {
			return inField(key, err)
		}
	}
}

func decodeArray(d *decoder, fn func() error) error {
	ok, err := d.arrStart()
	if err != nil || !ok {
		return err
	}
	for n := 0; ; n++ {
		more, err := d.arrNext(n)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
		if err := fn(); err != nil {
			return inIndex(n, err)
		}
	}
}

func decodeActor(d *decoder, a *ocsfActor) error {
	return decodeObject(d, func(k []byte) error {
		if string(k) == "process" {
			var err error
			a.Process, err = decodeProcess(d)
			return err
		}
		return d.skip()
	})
}

func decodeProcess(d *decoder) (*ocsfProcess, error) {
	if isNull, err := d.null(); isNull || err != nil {
		return nil, err
	}
	p := new(ocsfProcess)
	err := decodeObject(d, func(k []byte) error {
		var err error
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
		return err
	})
	return p, err
}

func decodeFile(d *decoder) (*ocsfFile, error) {
	if isNull, err := d.null(); isNull || err != nil {
		return nil, err
	}
	f := new(ocsfFile)
	err := decodeObject(d, func(k []byte) error {
		var err error
		switch string(k) {
		case "path":
			f.Path, err = d.str()
		case "hashes":
			err = decodeArray(d, func() error {
				var h struct {
					AlgorithmID int    `json:"algorithm_id"`
					Algorithm   string `json:"algorithm"`
					Value       string `json:"value"`
				}
				err := decodeObject(d, func(k []byte) error {
					var err error
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
					return err
				})
				f.Hashes = append(f.Hashes, h)
				return err
			})
		default:
			err = d.skip()
		}
		return err
	})
	return f, err
}

func decodeEndpoint(d *decoder) (*ocsfEndpoint, error) {
	if isNull, err := d.null(); isNull || err != nil {
		return nil, err
	}
	e := new(ocsfEndpoint)
	err := decodeObject(d, func(k []byte) error {
		var err error
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
		return err
	})
	return e, err
}

func decodeURL(d *decoder) (*ocsfURL, error) {
	if isNull, err := d.null(); isNull || err != nil {
		return nil, err
	}
	u := new(ocsfURL)
	err := decodeObject(d, func(k []byte) error {
		var err error
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
		return err
	})
	return u, err
}

func decodeHTTPRequest(d *decoder) (*ocsfHTTPRequest, error) {
	if isNull, err := d.null(); isNull || err != nil {
		return nil, err
	}
	r := new(ocsfHTTPRequest)
	err := decodeObject(d, func(k []byte) error {
		var err error
		switch string(k) {
		case "http_method":
			r.HTTPMethod, err = d.str()
		case "url":
			r.URL, err = decodeURL(d)
		default:
			err = d.skip()
		}
		return err
	})
	return r, err
}

func decodeRule(d *decoder) (*ocsfRule, error) {
	if isNull, err := d.null(); isNull || err != nil {
		return nil, err
	}
	r := new(ocsfRule)
	err := decodeObject(d, func(k []byte) error {
		var err error
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
		return err
	})
	return r, err
}
