package openai

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnknownFieldsRefusedAsOpenAIRefusesThem(t *testing.T) {
	const msgs = `"model":"m","messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body string
		parse      func([]byte) (Request, error)
		wantParam  string // "" means accepted
	}{
		{"chat misspelt", `{` + msgs + `,"max_token":5}`, ParseChat, "max_token"},
		{"chat vendor field", `{` + msgs + `,"ignore_eos":true}`, ParseChat, "ignore_eos"},
		{"chat first unknown in sorted order", `{` + msgs + `,"zz":1,"aa":2}`, ParseChat, "aa"},
		{"chat labels accepted", `{` + msgs + `,"metadata":{"k":"v"},"store":true,"user":"u","service_tier":"auto","prompt_cache_key":"k","safety_identifier":"s","prompt_cache_retention":"24h","verbosity":"medium"}`, ParseChat, ""},
		{"chat extensions accepted", `{` + msgs + `,"top_k":5,"min_p":0.1,"block_size":4,"chat_template_kwargs":{"enable_thinking":false}}`, ParseChat, ""},
		{"completion misspelt", `{"prompt":"x","max_tokes":3}`, ParseCompletion, "max_tokes"},
		{"completion chat-only field", `{"prompt":"x","messages":[]}`, ParseCompletion, "messages"},
		{"completion fields accepted", `{"prompt":"x","best_of":1,"echo":false,"suffix":"","user":"u","logprobs":2}`, ParseCompletion, ""},
		{"embeddings misspelt", `{"input":"x","encoding":"float"}`, parseEmbeddingsOnly, "encoding"},
		{"embeddings fields accepted", `{"input":"x","model":"m","encoding_format":"base64","dimensions":32,"user":"u"}`, parseEmbeddingsOnly, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.parse([]byte(c.body))
			if c.wantParam == "" {
				require.NoError(t, err)
				return
			}
			var e *Error
			require.True(t, errors.As(err, &e), "err = %v", err)
			assert.Equal(t, http.StatusBadRequest, e.Status)
			assert.Equal(t, c.wantParam, e.Param)
			assert.Equal(t, "Unrecognized request argument supplied: "+c.wantParam, e.Message)
		})
	}
}

// parseEmbeddingsOnly is ParseEmbeddings in ParseChat's shape, for the table above.
func parseEmbeddingsOnly(body []byte) (Request, error) {
	_, err := ParseEmbeddings(body)
	return Request{}, err
}

func TestCheckFieldsResponsesWording(t *testing.T) {
	err := CheckFields([]byte(`{"model":"m","inputs":"x"}`), []string{"model", "input"})
	var e *Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, "inputs", e.Param)
	assert.Equal(t, "Unknown parameter: 'inputs'.", e.Message)
	assert.Equal(t, "unknown_parameter", e.Code)
	assert.NoError(t, CheckFields([]byte(`{"model":"m"}`), []string{"model", "input"}))
}

func TestCacheControlOnContentParts(t *testing.T) {
	part := func(cc string) string { return `{"type":"text","text":"x","cache_control":` + cc + `}` }
	r, err := ParseChat([]byte(`{"messages":[{"role":"system","content":[` + part(`{"type":"ephemeral"}`) + `]},` +
		`{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"},` + part(`{"type":"ephemeral","ttl":"1h"}`) + `]}],"cache_prompt":true}`))
	require.NoError(t, err)
	assert.Equal(t, []int{0, 2}, r.Gen.CacheBreakpoints)
	assert.False(t, r.Gen.NoCache)

	r, err = ParseChat([]byte(`{"messages":[{"role":"user","content":"a"}],"cache_prompt":false}`))
	require.NoError(t, err)
	assert.True(t, r.Gen.NoCache)

	for body, param := range map[string]string{
		`{"messages":[{"role":"user","content":[` + part(`{"type":"forever"}`) + `]}]}`:              "messages[0].content[0].cache_control.type",
		`{"messages":[{"role":"user","content":[` + part(`{"type":"ephemeral","ttl":"9h"}`) + `]}]}`: "messages[0].content[0].cache_control.ttl",
		`{"messages":[{"role":"user","content":[` + part(`[]`) + `]}]}`:                              "messages[0].content[0].cache_control",
	} {
		_, err := ParseChat([]byte(body))
		var e *Error
		require.True(t, errors.As(err, &e), body)
		assert.Equal(t, param, e.Param, body)
	}
	many := `{"messages":[`
	for i := range 5 {
		if i > 0 {
			many += ","
		}
		many += `{"role":"user","content":[` + part(`{"type":"ephemeral"}`) + `]}`
	}
	_, err = ParseChat([]byte(many + `]}`))
	var e *Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, "messages", e.Param)
}
