// Package openai is higgsd's HTTP adapter: the OpenAI-compatible API (chat completions, completions, models,
// health, metrics) over the ports.Generator inbound port. It only translates: request JSON → a checked
// ports.GenerateRequest (ParseChat, ParseCompletion), results → response JSON and SSE chunks, and every error
// → OpenAI's error shape with one mapper (ErrorFor).
//
// Unknown request fields are ignored only when they cannot change the output (user, store, metadata…).
// Fields that would change it and that higgs does not implement (penalties, logit_bias, n > 1,
// echo, suffix, best_of…) are refused with a 400 naming the field; their neutral values are accepted because
// SDKs send them by default. README.md lists them. response_format (json_object, json_schema), tool_choice
// "required" or a named function and strict tools become ports.GenerateRequest.Constraint (constrain.go,
// tools.go); the Generator compiles and enforces it. logprobs and top_logprobs (logprobs.go) become
// GenerateRequest.Logprobs / TopLogprobs, and the entries the Generator returns are written in chat's shape
// ({token, logprob, bytes, top_logprobs}, which the Responses API's output_text logprobs share) or the legacy
// completions arrays.
//
// Tool calling is a wire-format concern and lives here, not behind the port: the Generator renders the tools
// (ports.ChatOptions.Tools) and returns the answer text; this adapter parses that text for Hermes/Qwen3
// <tool_call> blocks (adapters/toolcall) into message.tool_calls or streamed delta.tool_calls, so ports
// needed no change.
//
// Streaming responses send their headers with the first output, so that errors found before any output
// (validation, a full queue) still get their own status; an error after that is sent as an SSE error event.
//
// The routes are registered on an httpapi.Server, beside the Messages API's (adapters/anthropic, a sibling
// this package does not import); the plumbing both share — body limits, JSON and SSE writing, request
// metrics, panic recovery — is adapters/httpapi, and only the shapes of answers are written here.
package openai
