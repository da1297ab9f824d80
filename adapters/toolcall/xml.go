package toolcall

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// The XML body Qwen3.5 and Qwen3-Coder write inside the same <tool_call> tags (vLLM's "qwen3_coder" parser):
//
//	<function=get_weather>
//	<parameter=location>
//	Paris
//	</parameter>
//	</function>
//
// Every value is written as text; the parameter's type in the tool's JSON Schema decides how it is read.
const (
	funcOpen   = "<function="
	funcClose  = "</function>"
	paramOpen  = "<parameter="
	paramClose = "</parameter>"
)

// ParamTypes holds, per function name, the JSON Schema type of each parameter, for reading XML-format
// values. A nil ParamTypes (or a function or parameter it does not know) reads every value as a string.
type ParamTypes map[string]map[string]ParamType

// ParamType is a parameter's type: the first non-null JSON Schema type, and whether null is allowed.
type ParamType struct {
	Type     string
	Nullable bool
}

// ParamTypesOf reads the parameter types of an OpenAI tools array. Entries it cannot read are skipped:
// the tools were validated before, and an unknown type only means values stay strings.
func ParamTypesOf(tools []byte) ParamTypes {
	var items []struct {
		Function struct {
			Name       string `json:"name"`
			Parameters struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"parameters"`
		} `json:"function"`
	}
	if json.Unmarshal(tools, &items) != nil {
		return nil
	}
	out := make(ParamTypes, len(items))
	for _, it := range items {
		props := make(map[string]ParamType, len(it.Function.Parameters.Properties))
		for name, schema := range it.Function.Parameters.Properties {
			props[name] = schemaType(schema)
		}
		out[it.Function.Name] = props
	}
	return out
}

// schemaType reads "type" (a string or an array of strings) or, failing that, "anyOf" of a property schema.
func schemaType(raw json.RawMessage) ParamType {
	var s struct {
		Type  json.RawMessage   `json:"type"`
		AnyOf []json.RawMessage `json:"anyOf"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return ParamType{Type: "string"}
	}
	var names []string
	var one string
	switch {
	case json.Unmarshal(s.Type, &one) == nil:
		names = []string{one}
	case json.Unmarshal(s.Type, &names) == nil:
	default:
		for _, opt := range s.AnyOf {
			var o struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(opt, &o) == nil && o.Type != "" {
				names = append(names, o.Type)
			}
		}
	}
	var t ParamType
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		switch {
		case n == "null":
			t.Nullable = true
		case t.Type == "":
			t.Type = n
		}
	}
	switch {
	case t.Type != "":
	case t.Nullable:
		t.Type = "null" // only null: values are read as JSON
	default:
		t.Type = "string" // no type given: as vLLM, a string
	}
	return t
}

// tagName reads an opening tag open+NAME+">" at the start of s: NAME (trimmed, non-empty, on one line, with no
// "<") and what follows the ">".
func tagName(s, open string) (name, rest string, ok bool) {
	after, ok := strings.CutPrefix(s, open)
	if !ok {
		return "", "", false
	}
	gt := strings.IndexByte(after, '>')
	if gt <= 0 || strings.ContainsAny(after[:gt], "<\n") {
		return "", "", false
	}
	name = strings.TrimSpace(after[:gt])
	return name, after[gt+1:], name != ""
}

// parseXMLBody reads <function=NAME> <parameter=P>VALUE</parameter>… </function>. As vLLM's qwen3_coder
// parser does, a missing </parameter> ends the value at the next <parameter= (or at the end), and a missing
// </function> is tolerated. Anything else in the body (text between parameters, a repeated parameter) makes it
// no call.
func parseXMLBody(body string, types ParamTypes) (Call, bool) {
	name, rest, ok := tagName(strings.TrimSpace(body), funcOpen)
	if !ok {
		return Call{}, false
	}
	inner := strings.TrimRight(rest, whitespace)
	inner = strings.TrimSuffix(inner, funcClose)
	var buf bytes.Buffer
	buf.WriteByte('{')
	seen := map[string]bool{}
	for {
		inner = strings.TrimLeft(inner, whitespace)
		if inner == "" {
			break
		}
		param, body, ok := tagName(inner, paramOpen)
		if !ok || seen[param] {
			return Call{}, false
		}
		value, tail, closed := strings.Cut(body, paramClose)
		if next := strings.Index(body, paramOpen); next >= 0 && (!closed || next < len(value)) {
			// No </parameter> before the next parameter: the value ends there.
			value, tail = body[:next], body[next:]
		}
		seen[param] = true
		// The template puts the value on its own lines: one newline on each side is layout, not value.
		value = strings.TrimPrefix(value, "\n")
		value = strings.TrimSuffix(value, "\n")
		if len(seen) > 1 {
			buf.WriteString(", ")
		}
		buf.Write(jsonString(param))
		buf.WriteString(": ")
		buf.Write(xmlValue(value, types[name][param]))
		inner = tail
	}
	buf.WriteByte('}')
	return Call{Name: name, Arguments: buf.String()}, true
}

// xmlValue turns a written value into JSON by its schema type, as vLLM's qwen3_coder parser does (strings
// stay as written; numbers, booleans, null and JSON objects or arrays are read; what does not read as its
// type stays a string). Python literals that vLLM also reads (single-quoted dicts…) stay strings here.
func xmlValue(v string, t ParamType) []byte {
	typ := t.Type
	lower := strings.ToLower(strings.TrimSpace(v))
	if typ == "" {
		return jsonString(v) // a parameter the tools do not declare
	}
	if t.Nullable && (lower == "null" || lower == "none") {
		return []byte("null")
	}
	switch typ {
	case "string", "str", "text", "varchar", "char", "enum":
		return jsonString(v)
	}
	if lower == "null" || lower == "none" {
		return []byte("null")
	}
	s := strings.TrimSpace(v)
	switch {
	case hasAnyPrefix(typ, "int", "uint", "long", "short", "unsigned"):
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return strconv.AppendInt(nil, i, 10)
		}
	case hasAnyPrefix(typ, "num", "float"):
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				return strconv.AppendInt(nil, int64(f), 10)
			}
			return strconv.AppendFloat(nil, f, 'g', -1, 64)
		}
	case typ == "boolean" || typ == "bool" || typ == "binary":
		// vLLM reads anything but "true" as false.
		return []byte(strconv.FormatBool(lower == "true"))
	default:
		// object, array and types this reader does not know: JSON if it is JSON.
		if s != "" && json.Valid([]byte(s)) {
			var b bytes.Buffer
			if json.Compact(&b, []byte(s)) == nil {
				return b.Bytes()
			}
		}
	}
	return jsonString(v)
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// jsonString encodes s as a JSON string without HTML escaping (arguments are read by programs, not browsers).
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
