package openai

import (
	"encoding/json"
	"math"

	"github.com/higgs-go/higgs/ports"
)

// maxCompletionLogprobs is the most alternatives /v1/completions' logprobs may ask for (OpenAI's bound).
const maxCompletionLogprobs = 5

// wholeNumber reads a JSON integer (1 and 1.0 alike); ok is false for anything else.
func wholeNumber(r json.RawMessage) (int, bool) {
	var f float64
	if json.Unmarshal(r, &f) != nil || f != math.Trunc(f) || math.Abs(f) > 1<<30 {
		return 0, false
	}
	return int(f), true
}

// chatLogprobs reads chat's logprobs (a boolean) and top_logprobs (0..20, only with logprobs true).
func (p params) chatLogprobs() (bool, int, error) {
	var on bool
	if !isNull(p.Logprobs) {
		if err := json.Unmarshal(p.Logprobs, &on); err != nil {
			return false, 0, badRequest("logprobs", "logprobs must be a boolean, not %s", rawKind(p.Logprobs))
		}
	}
	if isNull(p.TopLogprobs) {
		return on, 0, nil
	}
	n, ok := wholeNumber(p.TopLogprobs)
	switch {
	case !ok && isNumber(p.TopLogprobs):
		return false, 0, badRequest("top_logprobs", "top_logprobs must be an integer between 0 and %d, not %s", ports.MaxTopLogprobs, p.TopLogprobs)
	case !ok:
		return false, 0, badRequest("top_logprobs", "top_logprobs must be an integer, not %s", rawKind(p.TopLogprobs))
	case n < 0 || n > ports.MaxTopLogprobs:
		return false, 0, badRequest("top_logprobs", "top_logprobs must be between 0 and %d, not %d", ports.MaxTopLogprobs, n)
	case n > 0 && !on:
		return false, 0, badRequest("top_logprobs", "top_logprobs needs logprobs set to true")
	}
	return on, n, nil
}

// completionLogprobs reads /v1/completions' logprobs: the number of alternatives (0..5), null or false for
// none; top_logprobs is chat's field.
func (p params) completionLogprobs() (bool, int, error) {
	if !isNull(p.TopLogprobs) && !rawIs(p.TopLogprobs, "0") {
		return false, 0, badRequest("top_logprobs", "top_logprobs is a chat completions field; on /v1/completions send logprobs: N")
	}
	if isNull(p.Logprobs) || rawIs(p.Logprobs, "false") {
		return false, 0, nil
	}
	n, ok := wholeNumber(p.Logprobs)
	switch {
	case !ok:
		return false, 0, badRequest("logprobs", "logprobs must be an integer between 0 and %d, not %s", maxCompletionLogprobs, rawOrKind(p.Logprobs))
	case n < 0 || n > maxCompletionLogprobs:
		return false, 0, badRequest("logprobs", "logprobs must be between 0 and %d, not %d", maxCompletionLogprobs, n)
	}
	return true, n, nil
}

// rawOrKind shows a number as it was sent and anything else by its JSON type.
func rawOrKind(r json.RawMessage) string {
	if isNumber(r) {
		return string(r)
	}
	return rawKind(r)
}

// ChatLogprobs is a chat choice's logprobs: one entry per output token.
type ChatLogprobs struct {
	Content []ChatTokenLogprob `json:"content"`
	// Refusal is always null: higgs does not produce refusals apart from content.
	Refusal []ChatTokenLogprob `json:"refusal"`
}

// ChatTokenLogprob is one output token: its text, log-probability, UTF-8 bytes and the most likely
// alternatives at its position.
type ChatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []ChatTopLogprob `json:"top_logprobs"`
}

// ChatTopLogprob is one alternative.
type ChatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// CompletionLogprobs is a /v1/completions choice's logprobs, in the legacy parallel-array shape.
// TopLogprobs[i] maps the text of each of the most likely tokens at position i, and of the token chosen
// there, to its log-probability (so up to logprobs+1 entries); TextOffset[i] is the number of characters of
// the choice's text before token i.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// wireLogprob is a log-probability JSON can carry: a token the constraint forbids would be −Inf, written
// −9999 as OpenAI does.
func wireLogprob(v float64) float64 {
	if math.IsInf(v, -1) || math.IsNaN(v) || v < -9999 {
		return -9999
	}
	return v
}

func wireBytes(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// chatLogprobsOf translates entries; nil entries (not asked for) give nil (the field is then null).
func chatLogprobsOf(lps []ports.TokenLogprob) *ChatLogprobs {
	if lps == nil {
		return nil
	}
	out := &ChatLogprobs{Content: make([]ChatTokenLogprob, len(lps))}
	for i, lp := range lps {
		top := make([]ChatTopLogprob, len(lp.Top))
		for j, alt := range lp.Top {
			top[j] = ChatTopLogprob{Token: alt.Text, Logprob: wireLogprob(alt.Logprob), Bytes: wireBytes(alt.Bytes)}
		}
		out.Content[i] = ChatTokenLogprob{Token: lp.Text, Logprob: wireLogprob(lp.Logprob), Bytes: wireBytes(lp.Bytes), TopLogprobs: top}
	}
	return out
}

// completionLogprobsOf translates entries; nil entries give nil.
func completionLogprobsOf(lps []ports.TokenLogprob) *CompletionLogprobs {
	if lps == nil {
		return nil
	}
	out := &CompletionLogprobs{Tokens: make([]string, len(lps)), TokenLogprobs: make([]float64, len(lps)),
		TopLogprobs: make([]map[string]float64, len(lps)), TextOffset: make([]int, len(lps))}
	for i, lp := range lps {
		out.Tokens[i], out.TokenLogprobs[i], out.TextOffset[i] = lp.Text, wireLogprob(lp.Logprob), lp.Offset
		top := make(map[string]float64, len(lp.Top)+1)
		for _, alt := range lp.Top {
			if _, ok := top[alt.Text]; !ok {
				top[alt.Text] = wireLogprob(alt.Logprob)
			}
		}
		if _, ok := top[lp.Text]; !ok {
			top[lp.Text] = wireLogprob(lp.Logprob)
		}
		out.TopLogprobs[i] = top
	}
	return out
}
