package ocsftest

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"regexp"
	"strings"
)

// typeInfo is one OCSF data type: its primitive base and constraints. The
// class and object exports name types but do not define them; this table
// is the "types" section of OCSF 1.8.0 dictionary.json.
type typeInfo struct {
	base   string // boolean_t, float_t, integer_t, long_t, string_t, json_t
	maxLen int
	re     *regexp.Regexp
	lo, hi int64 // inclusive range for integers when hi > lo
	check  func(string) error
}

var types = map[string]typeInfo{
	"boolean_t":      {base: "boolean_t"},
	"float_t":        {base: "float_t"},
	"integer_t":      {base: "integer_t"},
	"long_t":         {base: "long_t"},
	"string_t":       {base: "string_t"},
	"json_t":         {base: "json_t"},
	"timestamp_t":    {base: "long_t"},
	"port_t":         {base: "integer_t", lo: 0, hi: 65535},
	"bytestring_t":   {base: "string_t", re: regexp.MustCompile(`^(?:(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)|(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=))?$`)},
	"datetime_t":     {base: "string_t", re: regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?([Zz]|[\+-]\d{2}:\d{2})?$`)},
	"email_t":        {base: "string_t", re: regexp.MustCompile("^[a-zA-Z0-9!#$%&'*+-/=?^_`{|}~.]+@[a-zA-Z0-9-]+\\.[a-zA-Z0-9-.]+$")},
	"file_hash_t":    {base: "string_t"},
	"file_name_t":    {base: "string_t"},
	"file_path_t":    {base: "string_t"},
	"hostname_t":     {base: "string_t"},
	"ip_t":           {base: "string_t", maxLen: 40, check: checkIP},
	"mac_t":          {base: "string_t", maxLen: 32, re: regexp.MustCompile(`^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$`)},
	"process_name_t": {base: "string_t"},
	"resource_uid_t": {base: "string_t"},
	"subnet_t":       {base: "string_t", maxLen: 42, check: checkSubnet},
	"url_t":          {base: "string_t"},
	"username_t":     {base: "string_t"},
	"uuid_t":         {base: "string_t", re: regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)},
}

// Palisade writes every timestamp_t in epoch milliseconds. A value below
// minMillis (2001-09-09 in ms) is almost surely seconds; above maxMillis
// (year 5138) microseconds or nanoseconds.
const (
	minMillis = 1_000_000_000_000
	maxMillis = 100_000_000_000_000
)

func checkIP(s string) error {
	if _, err := netip.ParseAddr(strings.TrimSpace(s)); err != nil {
		return fmt.Errorf("not an IP address")
	}
	return nil
}

func checkSubnet(s string) error {
	if _, err := netip.ParsePrefix(s); err != nil {
		return fmt.Errorf("not a CIDR subnet")
	}
	return nil
}

// jsonKind names the JSON kind of a decoded value for messages.
func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		if isIntLiteral(string(x)) {
			return "integer"
		}
		return "float"
	case string:
		return "string"
	case []any:
		return "array"
	case *object:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func isIntLiteral(s string) bool {
	return !strings.ContainsAny(s, ".eE")
}

// checkPrimitive validates v against the OCSF type name t.
func checkPrimitive(t string, v any) error {
	ti, ok := types[t]
	if !ok {
		return fmt.Errorf("definition uses unknown type %q", t)
	}
	switch ti.base {
	case "json_t":
		return nil
	case "boolean_t":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("wrong type: expected %s (boolean), got %s", t, jsonKind(v))
		}
	case "float_t":
		if _, ok := v.(json.Number); !ok {
			return fmt.Errorf("wrong type: expected %s (number), got %s", t, jsonKind(v))
		}
	case "integer_t", "long_t":
		n, ok := v.(json.Number)
		if !ok || !isIntLiteral(string(n)) {
			return fmt.Errorf("wrong type: expected %s (integer), got %s", t, jsonKind(v))
		}
		bi, ok := new(big.Int).SetString(string(n), 10)
		if !ok {
			return fmt.Errorf("wrong type: expected %s (integer), got %s", t, n)
		}
		if ti.base == "integer_t" && !bi.IsInt64() {
			return fmt.Errorf("value %s out of range for %s (64-bit integer)", n, t)
		}
		if ti.hi > ti.lo && (!bi.IsInt64() || bi.Int64() < ti.lo || bi.Int64() > ti.hi) {
			return fmt.Errorf("value %s out of range for %s [%d, %d]", n, t, ti.lo, ti.hi)
		}
		if t == "timestamp_t" && (!bi.IsInt64() || bi.Int64() < minMillis || bi.Int64() >= maxMillis) {
			return fmt.Errorf("timestamp %s is not epoch milliseconds", n)
		}
	case "string_t":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("wrong type: expected %s (string), got %s", t, jsonKind(v))
		}
		if ti.maxLen > 0 && len(s) > ti.maxLen {
			return fmt.Errorf("%s longer than %d bytes", t, ti.maxLen)
		}
		if ti.re != nil && !ti.re.MatchString(s) {
			return fmt.Errorf("%q is not a valid %s", s, t)
		}
		if ti.check != nil {
			if err := ti.check(s); err != nil {
				return fmt.Errorf("%q: %v (%s)", s, err, t)
			}
		}
	default:
		return fmt.Errorf("type %q has unknown base %q", t, ti.base)
	}
	return nil
}
