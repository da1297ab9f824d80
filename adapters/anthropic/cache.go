package anthropic

import (
	"encoding/json"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// cacheControl is a cache_control object: {"type": "ephemeral", "ttl": "5m" | "1h"}.
type cacheControl struct {
	Type *string `json:"type"`
	TTL  *string `json:"ttl"`
}

// marked reports whether raw (a block's or the request's cache_control) sets a breakpoint, checking it as
// Anthropic does. Absent and null set none.
func marked(raw json.RawMessage, field string) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var c cacheControl
	if json.Unmarshal(raw, &c) != nil {
		return false, invalid(field, "must be an object with a type")
	}
	switch {
	case c.Type == nil:
		return false, invalid(field+".type", "field required")
	case *c.Type != "ephemeral":
		return false, invalid(field+".type", "must be \"ephemeral\", not %q", *c.Type)
	case c.TTL != nil && *c.TTL != "5m" && *c.TTL != "1h":
		return false, invalid(field+".ttl", "must be \"5m\" or \"1h\", not %q", *c.TTL)
	}
	return true, nil
}

// withCache is any object that may carry cache_control.
type withCache struct {
	CacheControl json.RawMessage `json:"cache_control"`
}

// cacheBreakpoints reads the request's cache_control marks as prompt-cache breakpoints, each an index into
// the chat messages (ports.GenerateRequest.CacheBreakpoints). Anthropic caches the prompt's prefix in the
// order tools, system, messages, up to a marked block; higgs's chat templates print the tools inside the
// system turn, so a mark on a tool or a system block is a breakpoint at the end of the first turn, and a mark
// on a block of message k one at the end of the last chat message that message became (a breakpoint within
// a turn moves to its end, which the next request shares all the same). The top-level cache_control
// (automatic caching) marks the end of the conversation. More than four marks are refused, as Anthropic
// refuses them. ends[k] is the chat message index wire message k ended at.
func (b *body) cacheBreakpoints(ends []int) ([]int, error) {
	var out []int
	add := func(raw json.RawMessage, field string, at int) error {
		ok, err := marked(raw, field)
		if ok {
			out = append(out, at)
		}
		return err
	}
	if err := add(b.CacheControl, "cache_control", ends[len(ends)-1]); err != nil {
		return nil, err
	}
	var tools []withCache
	if json.Unmarshal(b.Tools, &tools) == nil {
		for i, t := range tools {
			if err := add(t.CacheControl, fmt.Sprintf("tools.%d.cache_control", i), 0); err != nil {
				return nil, err
			}
		}
	}
	var sys []withCache
	if json.Unmarshal(b.System, &sys) == nil {
		for i, blk := range sys {
			if err := add(blk.CacheControl, fmt.Sprintf("system.%d.cache_control", i), 0); err != nil {
				return nil, err
			}
		}
	}
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(b.Messages, &msgs) == nil {
		for k, m := range msgs {
			var blocks []withCache
			if k >= len(ends) || json.Unmarshal(m.Content, &blocks) != nil {
				continue
			}
			for j, blk := range blocks {
				if err := add(blk.CacheControl, fmt.Sprintf("messages.%d.content.%d.cache_control", k, j), ends[k]); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(out) > ports.MaxCacheBreakpoints {
		return nil, invalid("", "A maximum of %d blocks with cache_control may be provided. Found %d.", ports.MaxCacheBreakpoints, len(out))
	}
	return out, nil
}
