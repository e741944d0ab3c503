package ocsftest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"sort"
	"strings"
)

// Error is one validation failure at an attribute path
// ("actor.process.file.hashes[0].algorithm_id").
type Error struct {
	Path string
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// object is a decoded JSON object that keeps key order.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

const maxNesting = 256

// decode parses exactly one JSON value, with numbers as json.Number,
// objects as *object, and duplicate keys as an error (encoding/json would
// silently keep the last).
func decode(line []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	v, err := decodeValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &Error{Msg: "trailing data after the JSON object"}
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, path string, depth int) (any, error) {
	if depth > maxNesting {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("nested deeper than %d", maxNesting)}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, &Error{Path: path, Msg: "invalid JSON: " + err.Error()}
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, &Error{Path: path, Msg: "invalid JSON: " + err.Error()}
				}
				k := kt.(string)
				if _, dup := o.vals[k]; dup {
					return nil, &Error{Path: join(path, k), Msg: "duplicate key"}
				}
				v, err := decodeValue(dec, join(path, k), depth+1)
				if err != nil {
					return nil, err
				}
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, &Error{Path: path, Msg: "invalid JSON: " + err.Error()}
			}
			return o, nil
		case '[':
			arr := []any{}
			for i := 0; dec.More(); i++ {
				v, err := decodeValue(dec, fmt.Sprintf("%s[%d]", path, i), depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, &Error{Path: path, Msg: "invalid JSON: " + err.Error()}
			}
			return arr, nil
		}
		return nil, &Error{Path: path, Msg: "invalid JSON"}
	default:
		return t, nil
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

type validator struct {
	s        *Schema
	profiles map[string]bool
	errs     []error
}

func (v *validator) errorf(path, format string, args ...any) {
	v.errs = append(v.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Validate checks one event (one JSONL line) against the definitions and
// returns every violation found; nil means valid. It checks: a known
// class_uid; every attribute defined in its class or object (attributes a
// profile adds only when metadata.profiles declares it; profiles known);
// types (integers are JSON integers, timestamps epoch milliseconds,
// objects recursively, arrays where is_array); required attributes
// present and not null; enum values defined and caption siblings equal to
// the caption (for 99/Other: a source value, not "Other"); at_least_one
// and just_one constraints; no deprecated attributes or values; no
// duplicate keys; type_uid = class_uid*100 + activity_id; metadata.version
// "1.8.0". Objects without a definition (here or in the supplement) are
// errors, so nothing passes unchecked.
func (s *Schema) Validate(line []byte) []error {
	val, err := decode(bytes.TrimSpace(line))
	if err != nil {
		return []error{err}
	}
	ev, ok := val.(*object)
	if !ok {
		return []error{&Error{Msg: "event is a JSON " + jsonKind(val) + ", not an object"}}
	}
	v := &validator{s: s, profiles: map[string]bool{}}
	cls := v.class(ev)
	if cls == nil {
		return v.errs
	}
	v.readProfiles(ev)
	v.object("", ev, cls)
	v.classInvariants(ev)
	return v.errs
}

func (v *validator) class(ev *object) *Def {
	raw, ok := ev.get("class_uid")
	if !ok {
		v.errorf("class_uid", "required attribute missing")
		return nil
	}
	n, ok := raw.(json.Number)
	if !ok || !isIntLiteral(string(n)) {
		v.errorf("class_uid", "wrong type: expected integer, got %s", jsonKind(raw))
		return nil
	}
	id, err := n.Int64()
	if err != nil {
		v.errorf("class_uid", "%s is not a class", n)
		return nil
	}
	cls := v.s.Classes[int(id)]
	if cls == nil {
		v.errorf("class_uid", "unknown class %d (known: %v)", id, v.s.classUIDs())
	}
	return cls
}

func (s *Schema) classUIDs() []int {
	var out []int
	for uid := range s.Classes {
		out = append(out, uid)
	}
	sort.Ints(out)
	return out
}

func (v *validator) readProfiles(ev *object) {
	md, ok := ev.get("metadata")
	if !ok {
		return
	}
	mo, ok := md.(*object)
	if !ok {
		return
	}
	raw, ok := mo.get("profiles")
	if !ok {
		return
	}
	list, ok := raw.([]any)
	if !ok {
		return // the type check of metadata.profiles reports it
	}
	for i, p := range list {
		name, ok := p.(string)
		if !ok {
			continue
		}
		if !v.s.Profiles[name] {
			v.errorf(fmt.Sprintf("metadata.profiles[%d]", i), "unknown profile %q", name)
			continue
		}
		v.profiles[name] = true
	}
}

// object validates the attributes of o against def.
func (v *validator) object(path string, o *object, def *Def) {
	if len(def.Attributes) == 0 {
		return // an open object (object type "object": unmapped, xattributes)
	}
	for _, k := range o.keys {
		a, ok := def.Attributes[k]
		kp := join(path, k)
		switch {
		case !ok:
			v.errorf(kp, "unknown attribute: not defined in %s", v.describe(def))
			continue
		case !allowed(a, v.profiles):
			v.errorf(kp, "attribute belongs to profile %s, which metadata.profiles does not declare", strings.Join(a.Profiles, " or "))
			continue
		case a.Deprecated != nil:
			v.errorf(kp, "attribute is deprecated since %s: %s", a.Deprecated.Since, stripTags(a.Deprecated.Message))
		}
		v.value(kp, o.vals[k], a)
		v.enum(kp, o, k, a)
	}
	names := make([]string, 0, len(def.Attributes))
	for name := range def.Attributes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		a := def.Attributes[name]
		if a.Requirement != "required" || !allowed(a, v.profiles) {
			continue
		}
		if val, ok := o.get(name); !ok || val == nil {
			v.errorf(join(path, name), "required attribute missing from %s", v.describe(def))
		}
	}
	v.constraints(path, o, def)
}

func (v *validator) describe(def *Def) string {
	if def.UID != 0 || v.s.Classes[def.UID] == def {
		return fmt.Sprintf("class %s (%d)", def.Name, def.UID)
	}
	return "object " + def.Name
}

func (v *validator) value(path string, val any, a Attr) {
	if val == nil {
		v.errorf(path, "null value (omit the attribute instead)")
		return
	}
	if a.IsArray {
		arr, ok := val.([]any)
		if !ok {
			v.errorf(path, "wrong type: expected array of %s, got %s", typeName(a), jsonKind(val))
			return
		}
		for i, el := range arr {
			if el == nil {
				v.errorf(fmt.Sprintf("%s[%d]", path, i), "null array element")
				continue
			}
			v.single(fmt.Sprintf("%s[%d]", path, i), el, a)
		}
		return
	}
	if _, isArr := val.([]any); isArr {
		v.errorf(path, "wrong type: expected %s, got array", typeName(a))
		return
	}
	v.single(path, val, a)
}

func typeName(a Attr) string {
	if a.Type == "object_t" {
		return a.ObjectType + " (object)"
	}
	return a.Type
}

func (v *validator) single(path string, val any, a Attr) {
	if a.Type != "object_t" {
		if err := checkPrimitive(a.Type, val); err != nil {
			v.errorf(path, "%v", err)
		}
		return
	}
	o, ok := val.(*object)
	if !ok {
		v.errorf(path, "wrong type: expected %s, got %s", typeName(a), jsonKind(val))
		return
	}
	if a.ObjectType == "object" {
		return // open object
	}
	def := v.s.Objects[a.ObjectType]
	if def == nil {
		v.errorf(path, "no definition for object type %q in %s or the ocsftest supplement; cannot validate it", a.ObjectType, v.s.Dir)
		return
	}
	v.object(path, o, def)
}

// enumKey renders a scalar as the enum key the definitions use.
func enumKey(val any) (string, bool) {
	switch x := val.(type) {
	case json.Number:
		if !isIntLiteral(string(x)) {
			return "", false
		}
		bi, ok := new(big.Int).SetString(string(x), 10)
		if !ok {
			return "", false
		}
		return bi.String(), true
	case string:
		return x, true
	}
	return "", false
}

func (v *validator) enum(path string, o *object, key string, a Attr) {
	if len(a.Enum) == 0 {
		return
	}
	val := o.vals[key]
	one := func(p string, el any) (string, bool) {
		k, ok := enumKey(el)
		if !ok {
			return "", false // wrong type, reported by value
		}
		e, ok := a.Enum[k]
		if !ok {
			v.errorf(p, "value %s is not defined for enum %s (defined: %s)", k, key, enumKeys(a.Enum))
			return "", false
		}
		if e.Deprecated != nil {
			v.errorf(p, "enum value %s is deprecated since %s: %s", k, e.Deprecated.Since, stripTags(e.Deprecated.Message))
		}
		return k, true
	}
	if a.IsArray {
		arr, _ := val.([]any)
		for i, el := range arr {
			one(fmt.Sprintf("%s[%d]", path, i), el)
		}
		return
	}
	k, ok := one(path, val)
	if !ok || a.Sibling == "" {
		return
	}
	sib, present := o.get(a.Sibling)
	if !present {
		return
	}
	label, isStr := sib.(string)
	if !isStr {
		return // type check reports it
	}
	caption := a.Enum[k].Caption
	sp := strings.TrimSuffix(path, key) + a.Sibling
	if k == "99" {
		if label == caption {
			v.errorf(sp, "%s is 99 (%s): the sibling must carry the source value, not %q", key, caption, caption)
		}
		return
	}
	if label != caption {
		v.errorf(sp, "%q does not match the caption %q of %s %s", label, caption, key, k)
	}
}

func enumKeys(m map[string]Enum) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	return strings.Join(keys, ",")
}

func (v *validator) constraints(path string, o *object, def *Def) {
	kinds := make([]string, 0, len(def.Constraints))
	for k := range def.Constraints {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		attrs := def.Constraints[kind]
		n := 0
		for _, a := range attrs {
			if val, ok := o.get(a); ok && val != nil {
				n++
			}
		}
		where := path
		if where == "" {
			where = "(event)"
		}
		switch kind {
		case "at_least_one":
			if n == 0 {
				v.errorf(where, "constraint at_least_one of %s failed: none present", strings.Join(attrs, ", "))
			}
		case "just_one":
			if n != 1 {
				v.errorf(where, "constraint just_one of %s failed: %d present", strings.Join(attrs, ", "), n)
			}
		default:
			v.errorf(where, "definition of %s has unknown constraint %q", def.Name, kind)
		}
	}
}

func (v *validator) classInvariants(ev *object) {
	cu, _ := ev.get("class_uid")
	au, aok := ev.get("activity_id")
	tu, tok := ev.get("type_uid")
	c, _ := enumKey(cu)
	a, aIsInt := enumKey(au)
	t, tIsInt := enumKey(tu)
	if aok && tok && aIsInt && tIsInt {
		ci, _ := new(big.Int).SetString(c, 10)
		ai, _ := new(big.Int).SetString(a, 10)
		ti, _ := new(big.Int).SetString(t, 10)
		if ci != nil && ai != nil && ti != nil {
			want := new(big.Int).Add(new(big.Int).Mul(ci, big.NewInt(100)), ai)
			if want.Cmp(ti) != 0 {
				v.errorf("type_uid", "%s is not class_uid*100+activity_id = %s", t, want)
			}
		}
	}
	md, ok := ev.get("metadata")
	if mo, isObj := md.(*object); ok && isObj {
		if ver, ok := mo.get("version"); ok && ver != Version {
			v.errorf("metadata.version", "%v is not %q", ver, Version)
		}
	}
}

// ValidateJSON validates one event line against the definitions Default
// finds. When they cannot be found or loaded, the only error says so.
func ValidateJSON(line []byte) []error {
	s, err := Default()
	if err != nil {
		return []error{fmt.Errorf("ocsftest: OCSF definitions unavailable: %w", err)}
	}
	return s.Validate(line)
}

// Join folds validation errors into one error (nil when there are none).
func Join(errs []error) error { return errors.Join(errs...) }

// stripTags removes the HTML markup OCSF descriptions carry.
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}
