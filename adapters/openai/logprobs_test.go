package openai

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func TestParseLogprobs(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body  string
		chat  bool
		on    bool
		top   int
		param string // "" when accepted
	}{
		{`{` + msgs + `}`, true, false, 0, ""},
		{`{` + msgs + `,"logprobs":false,"top_logprobs":0}`, true, false, 0, ""},
		{`{` + msgs + `,"logprobs":true}`, true, true, 0, ""},
		{`{` + msgs + `,"logprobs":true,"top_logprobs":20}`, true, true, 20, ""},
		{`{` + msgs + `,"logprobs":true,"top_logprobs":21}`, true, false, 0, "top_logprobs"},
		{`{` + msgs + `,"top_logprobs":2}`, true, false, 0, "top_logprobs"},
		{`{` + msgs + `,"logprobs":1}`, true, false, 0, "logprobs"},
		{`{"prompt":"a"}`, false, false, 0, ""},
		{`{"prompt":"a","logprobs":null}`, false, false, 0, ""},
		{`{"prompt":"a","logprobs":false}`, false, false, 0, ""},
		{`{"prompt":"a","logprobs":0}`, false, true, 0, ""},
		{`{"prompt":"a","logprobs":5}`, false, true, 5, ""},
		{`{"prompt":"a","logprobs":6}`, false, false, 0, "logprobs"},
		{`{"prompt":"a","logprobs":-1}`, false, false, 0, "logprobs"},
		{`{"prompt":"a","logprobs":true}`, false, false, 0, "logprobs"},
		{`{"prompt":"a","logprobs":2,"top_logprobs":2}`, false, false, 0, "top_logprobs"},
	} {
		t.Run(tc.body, func(t *testing.T) {
			parse := ParseCompletion
			if tc.chat {
				parse = ParseChat
			}
			req, err := parse([]byte(tc.body))
			if tc.param != "" {
				var e *Error
				require.True(t, errors.As(err, &e), "%v", err)
				assert.Equal(t, tc.param, e.Param)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.on, req.Gen.Logprobs)
			assert.Equal(t, tc.top, req.Gen.TopLogprobs)
		})
	}
}

func TestLogprobShapes(t *testing.T) {
	lps := []ports.TokenLogprob{
		{Token: 1, Text: "he", Bytes: []byte("he"), Logprob: -0.5, Top: []ports.TopLogprob{
			{Token: 1, Text: "he", Bytes: []byte("he"), Logprob: -0.5}, {Token: 2, Text: "hi", Bytes: []byte("hi"), Logprob: -1}}},
		{Token: 3, Text: "\uFFFD", Bytes: []byte{0xc3}, Offset: 2, Logprob: math.Inf(-1)},
	}
	b, err := json.Marshal(chatLogprobsOf(lps))
	require.NoError(t, err)
	assert.JSONEq(t, `{"content":[
		{"token":"he","logprob":-0.5,"bytes":[104,101],"top_logprobs":[{"token":"he","logprob":-0.5,"bytes":[104,101]},{"token":"hi","logprob":-1,"bytes":[104,105]}]},
		{"token":"\uFFFD","logprob":-9999,"bytes":[195],"top_logprobs":[]}],"refusal":null}`, string(b))
	b, err = json.Marshal(completionLogprobsOf(lps))
	require.NoError(t, err)
	assert.JSONEq(t, `{"tokens":["he","\uFFFD"],"token_logprobs":[-0.5,-9999],
		"top_logprobs":[{"he":-0.5,"hi":-1},{"\uFFFD":-9999}],"text_offset":[0,2]}`, string(b))
	assert.Nil(t, chatLogprobsOf(nil))
	assert.Nil(t, completionLogprobsOf(nil))
	b, err = json.Marshal(chatLogprobsOf([]ports.TokenLogprob{}))
	require.NoError(t, err)
	assert.JSONEq(t, `{"content":[],"refusal":null}`, string(b))
}
