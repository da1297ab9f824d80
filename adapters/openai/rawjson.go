package openai

import (
	"bytes"
	"encoding/json"
	"errors"
)

func isNumber(r json.RawMessage) bool {
	var n float64 // not json.Number, which also takes a string holding a number
	return json.Unmarshal(r, &n) == nil
}

func isBoolOrNumber(r json.RawMessage) bool {
	var b bool
	return json.Unmarshal(r, &b) == nil || isNumber(r)
}

// rawKind names the JSON type of a value for error messages ("a string", "an object"…).
func rawKind(r json.RawMessage) string {
	t := bytes.TrimSpace(r)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// setKey returns the JSON object obj with key set to the string v, keeping the other keys in their order
// (templates may print the message with tojson, where order shows).
func setKey(obj json.RawMessage, key, v string) (json.RawMessage, error) {
	val, _ := json.Marshal(v)
	return setKeyRaw(obj, key, val)
}

// setKeyRaw is setKey for any JSON value val.
func setKeyRaw(obj json.RawMessage, key string, val json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	first, found := true, false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		if k == key {
			buf.Write(val)
			found = true
		} else {
			buf.Write(raw)
		}
	}
	if !found {
		if !first {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(key)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(val)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
