package openai

import (
	"encoding/json"
	"fmt"
	"slices"
)

// The top-level fields each endpoint takes: every field of OpenAI's request today (the params of the openai
// SDKs' ChatCompletionCreateParams and CompletionCreateParams) and higgs's extensions. OpenAI refuses any other
// field ("Unrecognized request argument supplied: …"), and so does higgs: a misspelt or newer parameter is
// never silently dropped, so a client learns at once that the server did not honour it.
//
// Each listed field is honoured, accepted and ignored because the answer is the same without it (metadata,
// store, user, service_tier, prompt_cache_key…: they label, bill, route or keep the exchange), or refused unless
// neutral because honouring it is impossible here and ignoring it would change what the answer means (n,
// penalties, logit_bias, audio…). docs/http-api.md lists them.
var (
	// sharedFields are taken by both /v1/chat/completions and /v1/completions.
	sharedFields = []string{
		"model", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options",
		"logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "user",
		// higgs's extensions (as vLLM and llama.cpp name them): the speculative block size, more samplers.
		"block_size", "top_k", "min_p", "repetition_penalty", "cache_prompt",
	}
	chatFields = append(slices.Clone(sharedFields),
		"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
		"response_format", "functions", "function_call", "modalities", "audio", "prediction", "reasoning_effort",
		"verbosity", "web_search_options", "metadata", "store", "service_tier", "prompt_cache_key",
		"prompt_cache_retention", "safety_identifier",
		// Extensions: template arguments (vLLM's), guided decoding (vLLM's older names, refused with a pointer).
		"chat_template_kwargs", "guided_json", "guided_regex", "guided_choice")
	// embeddingFields are the fields of OpenAI's EmbeddingCreateParams.
	embeddingFields = []string{"input", "model", "encoding_format", "dimensions", "user"}
	// completionFields add the raw-completion fields, and response_format (a higgs extension here, as in
	// vLLM); tools, tool_choice and top_logprobs are named so that their errors point to what serves them
	// (chat completions, logprobs: N) rather than calling them unknown.
	completionFields = append(slices.Clone(sharedFields),
		"prompt", "best_of", "echo", "suffix", "response_format", "tools", "tool_choice", "top_logprobs")
)

// checkFields refuses the first top-level member of a JSON object body (in sorted order, so the answer does
// not depend on map order) that allowed does not hold. body must already have decoded as an object.
func checkFields(body []byte, allowed []string, refuse func(field string) *Error) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return badRequest("", "the request body must be a JSON object")
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return refuse(k)
		}
	}
	return nil
}

// unrecognized is OpenAI's answer to a chat or completions field it does not know.
func unrecognized(field string) *Error {
	return badRequest(field, "Unrecognized request argument supplied: %s", field)
}

// CheckFields refuses a top-level field of body that allowed does not hold, with OpenAI's Responses API
// wording ("Unknown parameter: 'x'."), for the endpoints built on this package.
func CheckFields(body []byte, allowed []string) error {
	return checkFields(body, allowed, func(field string) *Error {
		e := badRequest(field, "%s", fmt.Sprintf("Unknown parameter: '%s'.", field))
		e.Code = "unknown_parameter"
		return e
	})
}
