// Package anthropic is higgsd's second wire format: Anthropic's Messages API (POST /v1/messages and
// POST /v1/messages/count_tokens) over the same ports.Generator the OpenAI adapter calls. It only
// translates: a request body becomes the one ports.GenerateRequest both APIs share (Anthropic content
// blocks become the OpenAI-shaped chat messages the chat template reads: tool_use blocks become tool_calls,
// tool_result blocks tool messages, thinking blocks reasoning_content), and the generator's text comes back
// as Anthropic content blocks (thinking, text, tool_use parsed by adapters/toolcall), streamed with
// Anthropic's event sequence. Every error leaves in Anthropic's shape
// ({"type":"error","error":{"type","message"}}) through one mapper, ErrorFor.
//
// The top-level fields are those Anthropic's API takes today (fields.go): each is honoured, accepted and
// ignored where it cannot change the answer, or refused unless neutral (thread, container, mcp_servers,
// context_management, compaction), thread with the error details the SDKs read to go on without one.
// Unknown fields are refused, as Anthropic's API does ("Extra inputs are not permitted"), so a feature higgs
// does not have is never silently dropped. Structured outputs
// (output_config.format), tool_choice any / tool and strict tools become ports.GenerateRequest.Constraint.
//
// The routes are registered on an httpapi.Server, beside the OpenAI API's (adapters/openai, a sibling this
// package does not import), whose metrics both feed; the plumbing both share is adapters/httpapi.
package anthropic
