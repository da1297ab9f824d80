package openai

import "encoding/json"

// cacheMark reads a content part's cache_control: Anthropic's {"type": "ephemeral"} (with an optional ttl
// of "5m" or "1h"), which OpenRouter and LiteLLM take on OpenAI-format parts too. A marked part makes its
// message's turn end a prefix-cache breakpoint (ports.GenerateRequest.CacheBreakpoints). Absent and null
// mark nothing.
func cacheMark(raw json.RawMessage, param string) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var c struct {
		Type *string `json:"type"`
		TTL  *string `json:"ttl"`
	}
	switch {
	case json.Unmarshal(raw, &c) != nil:
		return false, badRequest(param, "%s must be an object with a type", param)
	case c.Type == nil || *c.Type != "ephemeral":
		return false, badRequest(param+".type", "%s.type must be \"ephemeral\"", param)
	case c.TTL != nil && *c.TTL != "5m" && *c.TTL != "1h":
		return false, badRequest(param+".ttl", "%s.ttl must be \"5m\" or \"1h\", not %q", param, *c.TTL)
	}
	return true, nil
}
