package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/higgs-go/higgs/adapters/toolcall"
	"github.com/higgs-go/higgs/ports"
)

// toolName is OpenAI's rule for function names.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// parseTools checks tools and tool_choice. It returns the tools array to render (nil when the model is not
// offered tools), whether the answer is to be parsed for calls, and the constraint forcing calls (nil when the
// model decides freely). tool_choice "none" neither offers the tools nor parses — a deliberate difference from
// vLLM's default, which keeps them in the prompt and only skips parsing (a prompt should not offer calls that
// will not be read); "auto" (the default when tools are given) does both; "required" and a named function
// constrain the answer to calls (of any tool, or of that one), and "strict": true tools under "auto" hold
// every call the model starts to its tool's schema.
func parseTools(tools, choice json.RawMessage) (render []byte, parse bool, forced *ports.Constraint, err error) {
	mode, named := "auto", ""
	if !isNull(choice) {
		var s string
		if json.Unmarshal(choice, &s) == nil {
			switch s {
			case "none", "auto", "required":
				mode = s
			default:
				return nil, false, nil, badRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or a function object, not %q", s)
			}
		} else {
			var nc struct {
				Type     string `json:"type"`
				Function *struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(choice, &nc) != nil {
				return nil, false, nil, badRequest("tool_choice", "tool_choice must be a string or an object")
			}
			switch {
			case nc.Type != "function":
				return nil, false, nil, badRequest("tool_choice", "tool_choice.type must be \"function\", not %q", nc.Type)
			case nc.Function == nil || nc.Function.Name == "":
				return nil, false, nil, badRequest("tool_choice", "tool_choice.function.name is missing")
			}
			mode, named = "function", nc.Function.Name
		}
	}
	var items []json.RawMessage
	if !isNull(tools) {
		if err := json.Unmarshal(tools, &items); err != nil {
			return nil, false, nil, badRequest("tools", "tools must be an array of tool objects")
		}
	}
	seen := make(map[string]int, len(items))
	defs := make([]ports.ConstraintTool, 0, len(items))
	strict := false
	for i, it := range items {
		def, err := checkTool(it, i, seen)
		if err != nil {
			return nil, false, nil, err
		}
		strict = strict || def.Strict
		defs = append(defs, def)
	}
	switch {
	case (mode == "required" || mode == "function") && len(items) == 0:
		return nil, false, nil, badRequest("tool_choice", "tool_choice %s needs tools to call", choice)
	case mode == "function":
		j, ok := seen[named]
		if !ok {
			return nil, false, nil, badRequest("tool_choice", "tool_choice names the function %q, which is not among the tools", named)
		}
		forced = &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Tools: defs[j : j+1]}
	case mode == "required":
		forced = &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Tools: defs}
	case mode == "auto" && strict:
		forced = &ports.Constraint{Kind: ports.ConstrainStrictTools, Param: "tools", Tools: defs}
	}
	if len(items) == 0 || mode == "none" {
		return nil, false, nil, nil
	}
	// The template prints each tool as the client wrote it (key order included), so the array is passed on
	// unchanged.
	return bytes.TrimSpace(tools), true, forced, nil
}

// checkTool checks tools[i]: {"type": "function", "function": {"name", "description"?, "parameters"?,
// "strict"?}} and returns it as a constraint's tool.
func checkTool(raw json.RawMessage, i int, seen map[string]int) (ports.ConstraintTool, error) {
	var def ports.ConstraintTool
	param := fmt.Sprintf("tools[%d]", i)
	var t struct {
		Type     *string         `json:"type"`
		Function json.RawMessage `json:"function"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return def, badRequest(param, "%s must be an object with type \"function\" and a function", param)
	}
	switch {
	case t.Type == nil:
		return def, badRequest(param+".type", "%s.type is required (\"function\")", param)
	case *t.Type != "function":
		return def, unsupported(param+".type", fmt.Sprintf("tools of type %q are not served (function only)", *t.Type))
	case isNull(t.Function):
		return def, badRequest(param+".function", "%s.function is required", param)
	}
	var f struct {
		Name        *string         `json:"name"`
		Description json.RawMessage `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	}
	if err := json.Unmarshal(t.Function, &f); err != nil {
		return def, badRequest(param+".function", "%s.function must be an object with a name", param)
	}
	var desc string
	switch {
	case f.Name == nil:
		return def, badRequest(param+".function.name", "%s.function.name is required", param)
	case !toolName.MatchString(*f.Name):
		return def, badRequest(param+".function.name", "%s.function.name %q must be 1 to 64 letters, digits, underscores or dashes", param, *f.Name)
	case !isNull(f.Description) && json.Unmarshal(f.Description, &desc) != nil:
		return def, badRequest(param+".function.description", "%s.function.description must be a string", param)
	case !isNull(f.Parameters) && !bytes.HasPrefix(bytes.TrimSpace(f.Parameters), []byte("{")):
		return def, badRequest(param+".function.parameters", "%s.function.parameters must be a JSON Schema object", param)
	}
	if j, dup := seen[*f.Name]; dup {
		return def, badRequest(param+".function.name", "%s.function.name %q is already the name of tools[%d]; names must be unique", param, *f.Name, j)
	}
	seen[*f.Name] = i
	def = ports.ConstraintTool{Name: *f.Name, Strict: f.Strict != nil && *f.Strict}
	if !isNull(f.Parameters) {
		def.Parameters = bytes.TrimSpace(f.Parameters)
	}
	return def, nil
}

// toolCallsForTemplate checks an assistant message's tool_calls as far as templates read them (function
// name and arguments), so that a malformed history is a clear 400 rather than a silently odd prompt, and
// returns them with each function's arguments as a JSON object rather than OpenAI's string of JSON: chat
// templates expect a mapping (Qwen3's prints it with tojson, Qwen3.5's walks its items), and vLLM and
// transformers hand it to them that way. Absent, null or empty arguments become {}; key order is kept.
func toolCallsForTemplate(raw json.RawMessage, param string) (json.RawMessage, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest(param, "%s must be an array of {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", param)
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for j, it := range items {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var c struct {
			Type     *string         `json:"type"`
			Function json.RawMessage `json:"function"`
		}
		if err := json.Unmarshal(it, &c); err != nil {
			return nil, badRequest(pp, "%s must be an object with type \"function\" and a function", pp)
		}
		var f struct {
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		switch {
		case c.Type != nil && *c.Type != "function":
			return nil, unsupported(pp+".type", fmt.Sprintf("tool calls of type %q are not served (function only)", *c.Type))
		case isNull(c.Function):
			return nil, badRequest(pp+".function", "%s.function is required", pp)
		case json.Unmarshal(c.Function, &f) != nil:
			return nil, badRequest(pp+".function", "%s.function must be an object with a name and arguments", pp)
		case f.Name == nil || *f.Name == "":
			return nil, badRequest(pp+".function.name", "%s.function.name is required", pp)
		}
		args := bytes.TrimSpace(f.Arguments)
		if len(args) > 0 && args[0] == '"' {
			var s string
			_ = json.Unmarshal(args, &s) // a valid string: it came out of valid JSON
			args = bytes.TrimSpace([]byte(s))
		}
		switch {
		case len(args) == 0 || bytes.Equal(args, []byte("null")):
			args = []byte("{}")
		case args[0] != '{' || !json.Valid(args):
			return nil, badRequest(pp+".function.arguments", "%s.function.arguments must be a JSON object (or a string holding one)", pp)
		}
		fn, err := setKeyRaw(c.Function, "arguments", args)
		if err != nil {
			return nil, badRequest(pp+".function", "%s.function: %v", pp, err)
		}
		call, err := setKeyRaw(it, "function", fn)
		if err != nil {
			return nil, badRequest(pp, "%s: %v", pp, err)
		}
		if j > 0 {
			buf.WriteByte(',')
		}
		buf.Write(call)
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// toolCallIDs returns the ids of an assistant message's tool_calls (already checked by toolCallsForTemplate).
func toolCallIDs(raw json.RawMessage) map[string]bool {
	var calls []struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &calls) // checked to be an array of objects before
	ids := make(map[string]bool, len(calls))
	for _, c := range calls {
		if c.ID != "" {
			ids[c.ID] = true
		}
	}
	return ids
}

// checkToolReply checks a tool message's tool_call_id: required, and the id of a call of the latest
// assistant message (callIDs; nil when there is none), as OpenAI requires. A reply to no call would reach the
// template as an orphan the model was never trained on.
func checkToolReply(raw json.RawMessage, callIDs map[string]bool, param string) error {
	var id string
	switch {
	case isNull(raw):
		return badRequest(param+".tool_call_id", "%s.tool_call_id is required for role tool", param)
	case json.Unmarshal(raw, &id) != nil:
		return badRequest(param+".tool_call_id", "%s.tool_call_id must be a string", param)
	case id == "":
		return badRequest(param+".tool_call_id", "%s.tool_call_id must not be empty", param)
	case !callIDs[id]:
		return badRequest(param+".tool_call_id", "%s.tool_call_id %q matches no tool call of the preceding assistant message", param, id)
	}
	return nil
}

// toolCallsOf turns parsed calls into the wire shape, naming each with newID. Streamed calls carry their
// index in the message (first, first+1…); a whole message's calls carry none, as in OpenAI's responses.
func toolCallsOf(calls []toolcall.Call, newID func() string, streamed bool, first int) []ToolCall {
	out := make([]ToolCall, len(calls))
	for i, c := range calls {
		out[i] = ToolCall{ID: "call_" + newID(), Type: "function", Function: FunctionCall{Name: c.Name, Arguments: c.Arguments}}
		if streamed {
			idx := first + i
			out[i].Index = &idx
		}
	}
	return out
}

// structuredCallsOf turns a Generator's structured calls (a remote provider's) into the wire shape, keeping
// the provider's ids; indexes as toolCallsOf.
func structuredCallsOf(calls []ports.ToolCall, newID func() string, streamed bool, first int) []ToolCall {
	out := make([]ToolCall, len(calls))
	for i, c := range calls {
		id := c.ID
		if id == "" {
			id = "call_" + newID()
		}
		out[i] = ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: c.Name, Arguments: c.Arguments}}
		if streamed {
			idx := first + i
			out[i].Index = &idx
		}
	}
	return out
}

// toolFinish is the finish reason of a message: "tool_calls" when the model stopped after making calls.
// A message cut by max_tokens keeps "length", so the client knows the answer is incomplete.
func toolFinish(finish string, called bool) string {
	if called && finish == "stop" {
		return "tool_calls"
	}
	return finish
}
