package httpapi

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteJSON(t *testing.T) {
	fallback := []byte(`{"error":"internal"}`)
	for _, c := range []struct {
		name       string
		status     int
		v          any
		wantStatus int
		wantBody   string
	}{
		{"object", http.StatusOK, map[string]string{"a": "b"}, http.StatusOK, `{"a":"b"}` + "\n"},
		{"no HTML escaping", http.StatusCreated, "<think>a & b</think>", http.StatusCreated, `"<think>a & b</think>"` + "\n"},
		{"error status kept", http.StatusTooManyRequests, []int{1}, http.StatusTooManyRequests, "[1]\n"},
		{"unencodable", http.StatusOK, math.NaN(), http.StatusInternalServerError, string(fallback) + "\n"},
		{"unencodable type", http.StatusOK, make(chan int), http.StatusInternalServerError, string(fallback) + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			WriteJSON(rec, c.status, c.v, fallback)
			assert.Equal(t, c.wantStatus, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.Equal(t, c.wantBody, rec.Body.String())
		})
	}
}

// Marshal is json.Marshal but for HTML escaping: what it writes decodes to the same value.
func TestMarshal(t *testing.T) {
	for _, v := range []any{"<|im_end|>", map[string]any{"x": "<tool_call>&", "n": 1.5}, []string{"\u2028", "\n"}, nil} {
		b, err := Marshal(v)
		require.NoError(t, err)
		assert.NotContains(t, string(b), `\u003c`)
		assert.NotContains(t, string(b), "\n", "one line, no trailing newline")
		std, err := json.Marshal(v)
		require.NoError(t, err)
		var got, want any
		require.NoError(t, json.Unmarshal(b, &got))
		require.NoError(t, json.Unmarshal(std, &want))
		assert.Equal(t, want, got)
	}
	_, err := Marshal(math.Inf(1))
	assert.Error(t, err)
}

func TestJSONKind(t *testing.T) {
	for goKind, want := range map[string]string{
		"int": "an integer", "int64": "an integer", "uint8": "an integer", "float32": "a number", "float64": "a number",
		"bool": "a boolean", "string": "a string", "slice": "an array", "struct": "an object", "map": "an object",
		"ptr": "a ptr",
	} {
		assert.Equal(t, want, JSONKind(goKind), goKind)
	}
}
