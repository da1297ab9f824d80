package hfmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// object is a JSON object read key by key, so that each value's type can be checked and reported by name.
type object map[string]json.RawMessage

// parseObject decodes raw as a JSON object; null is an empty object.
func parseObject(raw []byte) (object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, err
	}
	return o, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// reader looks keys up in a list of objects (first hit wins; explicit nulls count as absent) and collects
// type errors instead of stopping at the first, so a config reports every problem at once.
type reader struct {
	scopes []scope
	errs   []error
}

type scope struct {
	name string // "text_config" or "" for the top level, for messages
	obj  object
}

func (r *reader) addErr(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
}

func (r *reader) unsupported(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...))
}

// lookup returns the first non-null value of key and the name of the scope it came from.
func (r *reader) lookup(key string) (json.RawMessage, string, bool) {
	for _, s := range r.scopes {
		if v, ok := s.obj[key]; ok && !isNull(v) {
			return v, qualify(s.name, key), true
		}
	}
	return nil, key, false
}

func qualify(scope, key string) string {
	if scope == "" {
		return key
	}
	return scope + "." + key
}

func (r *reader) has(key string) bool {
	_, _, ok := r.lookup(key)
	return ok
}

func (r *reader) int(key string, def int) int {
	v, where, ok := r.lookup(key)
	if !ok {
		return def
	}
	n, err := decodeInt(v)
	if err != nil {
		r.addErr("%s: %v", where, err)
		return def
	}
	return n
}

func (r *reader) float(key string, def float64) float64 {
	v, where, ok := r.lookup(key)
	if !ok {
		return def
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		r.addErr("%s: want a number, got %s", where, short(v))
		return def
	}
	return f
}

func (r *reader) bool(key string, def bool) bool {
	v, where, ok := r.lookup(key)
	if !ok {
		return def
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		r.addErr("%s: want true or false, got %s", where, short(v))
		return def
	}
	return b
}

func (r *reader) str(key, def string) string {
	v, where, ok := r.lookup(key)
	if !ok {
		return def
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		r.addErr("%s: want a string, got %s", where, short(v))
		return def
	}
	return s
}

func (r *reader) strings(key string) []string {
	v, where, ok := r.lookup(key)
	if !ok {
		return nil
	}
	var s []string
	if err := json.Unmarshal(v, &s); err != nil {
		r.addErr("%s: want a list of strings, got %s", where, short(v))
		return nil
	}
	return s
}

func (r *reader) ints(key string) ([]int, bool) {
	v, where, ok := r.lookup(key)
	if !ok {
		return nil, false
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(v, &raws); err != nil {
		r.addErr("%s: want a list of integers, got %s", where, short(v))
		return nil, true
	}
	out := make([]int, 0, len(raws))
	for i, x := range raws {
		n, err := decodeInt(x)
		if err != nil {
			r.addErr("%s[%d]: %v", where, i, err)
			continue
		}
		out = append(out, n)
	}
	return out, true
}

// obj returns a nested object value (nil when absent).
func (r *reader) obj(key string) (object, string) {
	v, where, ok := r.lookup(key)
	if !ok {
		return nil, where
	}
	o, err := parseObject(v)
	if err != nil {
		r.addErr("%s: want an object, got %s", where, short(v))
		return nil, where
	}
	return o, where
}

// tokenIDs reads an id that may be an integer or a list of integers (eos_token_id).
func (r *reader) tokenIDs(key string) []int32 {
	v, where, ok := r.lookup(key)
	if !ok {
		return nil
	}
	ids, err := decodeTokenIDs(v)
	if err != nil {
		r.addErr("%s: %v", where, err)
	}
	return ids
}

func decodeTokenIDs(v json.RawMessage) ([]int32, error) {
	if isNull(v) {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(v, &list); err != nil {
		list = []json.RawMessage{v}
	}
	out := make([]int32, 0, len(list))
	for _, x := range list {
		n, err := decodeInt(x)
		if err != nil {
			return nil, fmt.Errorf("want a token id or a list of them: %v", err)
		}
		if n < 0 || n > math.MaxInt32 {
			return nil, fmt.Errorf("token id %d out of range", n)
		}
		out = append(out, int32(n))
	}
	return out, nil
}

// decodeInt accepts JSON integers, and floats with an integral value (some exporters write 1e6 or 4096.0).
func decodeInt(v json.RawMessage) (int, error) {
	var n json.Number
	// json.Number also accepts a quoted number; a config that writes "2560" is malformed, so refuse strings.
	if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '"' {
		return 0, fmt.Errorf("want an integer, got %s", short(v))
	}
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, fmt.Errorf("want an integer, got %s", short(v))
	}
	if i, err := n.Int64(); err == nil {
		if i > math.MaxInt32 || i < math.MinInt32 {
			return 0, fmt.Errorf("integer %d out of range", i)
		}
		return int(i), nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
		return 0, fmt.Errorf("want an integer, got %s", short(v))
	}
	return int(f), nil
}

func short(v json.RawMessage) string {
	s := strings.TrimSpace(string(v))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}
