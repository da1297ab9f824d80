package anthropic

import (
	"encoding/json"
	"net/http"
)

// The top-level fields each endpoint takes, as Anthropic's Messages API takes them today (the fields of
// @anthropic-ai/sdk's MessageCreateParams and MessageCountTokensParams, beta ones included, less the ones the
// SDK sends as headers: betas, user_profile_id, workspace_id). Anything else is refused as Anthropic refuses
// it ("Extra inputs are not permitted"), so that a feature higgs lacks is never silently dropped.
//
// Each field is honoured, accepted and ignored because it cannot change the answer here, or refused unless
// neutral (refuseUnserved) because honouring it is impossible and ignoring it would change what the answer
// means; docs/http-api.md lists them.
var (
	createFields = []string{
		// Honoured.
		"model", "max_tokens", "messages", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
		"tools", "tool_choice", "thinking", "output_config", "output_format", "cache_control",
		// Accepted and ignored: they bill, route, label or tune latency, and the answer is the same without them.
		"metadata", "service_tier", "speed", "inference_geo", "diagnostics", "billing_policy",
		"fallback_credit_token", "fallbacks",
		// Refused unless null (or empty): server-held state and server features higgs does not have.
		"thread", "container", "mcp_servers", "context_management", "compaction",
		// higgs extensions, as on the OpenAI side.
		"block_size", "seed", "cache_prompt",
	}
	countFields = []string{"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config",
		"output_format", "speed", "cache_control", "billing_policy", "compaction", "mcp_servers", "context_management"}
)

// refuseUnserved refuses the fields of server features higgs does not have, unless their value is neutral.
// compaction is ignored by count_tokens, as Anthropic documents.
func (b *body) refuseUnserved(create bool) error {
	switch {
	case !isNull(b.Thread):
		// The error Anthropic's SDKs read as "this server cannot thread the request": with
		// unsupportedRequestBehavior "continue_unthreaded" (the tool runner's) they send the full history
		// again without the field, and every later turn too.
		return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: "thread: not supported by this server: it holds no conversation state between requests; " +
				"send the full history in messages without a thread",
			Details: map[string]any{"error_code": "thread_unsupported_request", "unsupported": []string{"thread"}}}
	case !isNull(b.Container):
		return unsupported("container", "there is no code execution container")
	case !isNull(b.MCPServers) && !isEmptyArray(b.MCPServers):
		return unsupported("mcp_servers", "the MCP connector is not available; run the MCP client yourself and send its tools as custom tools")
	case !isNull(b.ContextManagement):
		return unsupported("context_management", "context is not edited on the server; trim the history yourself")
	case create && !isNull(b.Compaction):
		return unsupported("compaction", "conversations are not compacted on the server")
	case b.Speed != nil && *b.Speed != "standard" && *b.Speed != "fast":
		return invalid("speed", "must be \"standard\" or \"fast\", not %q", *b.Speed)
	}
	return nil
}

// isEmptyArray reports whether r is the JSON array [].
func isEmptyArray(r json.RawMessage) bool {
	var items []json.RawMessage
	return json.Unmarshal(r, &items) == nil && items != nil && len(items) == 0
}
