package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// Marshal is json.Marshal without HTML escaping: model output is full of <think> and <|im_end|>, which
// clients should read as written.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// WriteJSON sends v as JSON (Marshal) and a newline with status, or fallback (the API's own "internal
// server error" body) with a 500 when v cannot be encoded. The Content-Type matters: OpenAI's SDKs refuse
// JSON sent as text/plain.
func WriteJSON(w http.ResponseWriter, status int, v any, fallback []byte) {
	b, err := Marshal(v)
	if err != nil {
		b, status = fallback, http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// JSONKind names, for a client, the JSON kind a Go kind decodes from ("an integer", "a string", …): what a
// type error in a request body says was expected.
func JSONKind(goKind string) string {
	switch {
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"):
		return "an integer"
	case strings.HasPrefix(goKind, "float"):
		return "a number"
	case goKind == "bool":
		return "a boolean"
	case goKind == "string":
		return "a string"
	case goKind == "slice":
		return "an array"
	case goKind == "struct", goKind == "map":
		return "an object"
	}
	return "a " + goKind
}
