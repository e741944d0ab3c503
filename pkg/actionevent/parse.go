package actionevent

import "time"

// Parse decodes one mac.action_event.v1 record strictly: unknown fields,
// wrongly typed values and trailing data are errors naming the field. It
// does not call Validate. Receivers (the reference hub, tests) use it; it
// accepts exactly what AppendJSON and encoding/json produce.
func Parse(data []byte) (Record, error) {
	d := decoder{b: data}
	var r Record
	err := strictObject(&d, func(k []byte) error {
		var err error
		switch string(k) {
		case "schema":
			r.Schema, err = d.str()
		case "event_id":
			r.EventID, err = d.str()
		case "time":
			var s string
			if s, err = d.str(); err == nil && s != "" {
				r.Time, err = time.Parse(time.RFC3339Nano, s)
				if err != nil {
					err = &decodeError{reason: "not an RFC 3339 time"}
				}
			}
		case "layer":
			r.Layer, err = d.str()
		case "category":
			r.Category, err = d.str()
		case "action":
			r.Action, err = d.str()
		case "severity":
			r.Severity, err = d.str()
		case "agent_id":
			r.AgentID, err = d.str()
		case "sandbox_id":
			r.SandboxID, err = d.str()
		case "reason":
			r.Reason, err = d.str()
		case "actor":
			err = strictObject(&d, func(k []byte) error {
				var err error
				switch string(k) {
				case "pid":
					r.Actor.PID, _, err = d.int()
				case "process":
					r.Actor.Process, err = d.str()
				case "binary":
					r.Actor.Binary, err = d.str()
				case "binary_sha256":
					r.Actor.BinarySHA256, err = d.str()
				default:
					return unknownField(&d)
				}
				return err
			})
		case "target":
			err = strictObject(&d, func(k []byte) error {
				var err error
				switch string(k) {
				case "host":
					r.Target.Host, err = d.str()
				case "port":
					r.Target.Port, _, err = d.intN()
				case "method":
					r.Target.Method, err = d.str()
				case "path":
					r.Target.Path, err = d.str()
				default:
					return unknownField(&d)
				}
				return err
			})
		case "policy":
			err = strictObject(&d, func(k []byte) error {
				var err error
				switch string(k) {
				case "name":
					r.Policy.Name, err = d.str()
				case "checksum":
					r.Policy.Checksum, err = d.str()
				case "rule":
					r.Policy.Rule, err = d.str()
				default:
					return unknownField(&d)
				}
				return err
			})
		case "source":
			err = strictObject(&d, func(k []byte) error {
				var err error
				switch string(k) {
				case "class_uid":
					r.Source.ClassUID, _, err = d.intN()
				case "class_name":
					r.Source.ClassName, err = d.str()
				case "activity_id":
					r.Source.ActivityID, _, err = d.intN()
				case "activity_name":
					r.Source.ActivityName, err = d.str()
				default:
					return unknownField(&d)
				}
				return err
			})
		default:
			return unknownField(&d)
		}
		return err
	})
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return Record{}, formatError(err)
	}
	return r, nil
}

func unknownField(d *decoder) error {
	if err := d.skip(); err != nil {
		return err
	}
	return &decodeError{reason: "unknown field"}
}

// strictObject is decodeObject for a value that must be an object (null is
// a type error).
func strictObject(d *decoder, fn func(key []byte) error) error {
	if d.peek() == 'n' {
		return &decodeError{reason: "want object, have JSON null"}
	}
	return decodeObject(d, fn)
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

// SplitBatch splits the body of POST /action-events, {"events":[...]},
// into the raw bytes of each element, checking that the body is valid
// JSON of that shape. Elements are not decoded; pass each to Parse.
func SplitBatch(body []byte) ([][]byte, error) {
	d := decoder{b: body}
	var out [][]byte
	seen := false
	err := strictObject(&d, func(k []byte) error {
		if string(k) != "events" {
			return unknownField(&d)
		}
		seen = true
		if d.peek() != '[' {
			return &decodeError{reason: "want array"}
		}
		return decodeArray(&d, func() error {
			d.ws()
			start := d.i
			if err := d.skip(); err != nil {
				return err
			}
			out = append(out, body[start:d.i])
			return nil
		})
	})
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return nil, formatError(err)
	}
	if !seen {
		return nil, &FormatError{Field: "events", Reason: "missing"}
	}
	return out, nil
}
