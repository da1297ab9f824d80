package anthropic

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCacheControlBreakpoints(t *testing.T) {
	const eph = `"cache_control":{"type":"ephemeral"}`
	tool := `{"name":"t","input_schema":{"type":"object"},` + eph + `}`
	cases := []struct {
		name, body string
		want       []int
	}{
		{"none", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, nil},
		{"automatic: the end of the conversation", `{"model":"m","max_tokens":1,` + eph + `,"system":"s","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`, []int{3}},
		{"system block: the first turn", `{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s",` + eph + `}],"messages":[{"role":"user","content":"hi"}]}`, []int{0}},
		{"tool: the first turn", `{"model":"m","max_tokens":1,"tools":[` + tool + `],"messages":[{"role":"user","content":"hi"}]}`, []int{0}},
		{"message block, after a system prompt", `{"model":"m","max_tokens":1,"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"a",` + eph + `}]},{"role":"assistant","content":"b"},{"role":"user","content":[{"type":"text","text":"c",` + eph + `}]}]}`, []int{1, 3}},
		{"tool_result message: the end of the last chat message it became", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"x","name":"t","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r",` + eph + `},{"type":"text","text":"more"}]}]}`, []int{3}},
		{"ttl 1h", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`, []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseMessages([]byte(c.body))
			require.NoError(t, err)
			assert.Equal(t, c.want, r.Gen.CacheBreakpoints)
		})
	}
	r, err := ParseMessages([]byte(`{"model":"m","max_tokens":1,"cache_prompt":false,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	assert.True(t, r.Gen.NoCache, "cache_prompt false opts out of the prefix cache")
}

func TestCacheControlRefusals(t *testing.T) {
	blk := func(cc string) string {
		return `{"type":"text","text":"a","cache_control":` + cc + `}`
	}
	five := `[` + blk(`{"type":"ephemeral"}`) + `,` + blk(`{"type":"ephemeral"}`) + `,` + blk(`{"type":"ephemeral"}`) + `,` +
		blk(`{"type":"ephemeral"}`) + `,` + blk(`{"type":"ephemeral"}`) + `]`
	cases := []struct{ name, body, msg string }{
		{"five marks", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":` + five + `}]}`, "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{"type", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[` + blk(`{"type":"persistent"}`) + `]}]}`, `messages.0.content.0.cache_control.type: must be "ephemeral"`},
		{"ttl", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[` + blk(`{"type":"ephemeral","ttl":"2h"}`) + `]}]}`, `cache_control.ttl: must be "5m" or "1h"`},
		{"not an object", `{"model":"m","max_tokens":1,"cache_control":"yes","messages":[{"role":"user","content":"a"}]}`, "cache_control: must be an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMessages([]byte(c.body))
			var e *Error
			require.True(t, errors.As(err, &e), "want an API error, got %v", err)
			assert.Equal(t, 400, e.Status)
			assert.Contains(t, e.Error(), c.msg)
		})
	}
}
