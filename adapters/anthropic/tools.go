package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/higgs-go/higgs/ports"
)

// toolName is Anthropic's rule for tool names.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// parseTools checks tools and tool_choice and returns the tools in the OpenAI shape the chat templates
// read ({"type": "function", "function": {"name", "description", "parameters"}}); nil when the model is not
// to be offered tools. forced is the constraint of tool_choice any (a call of any tool) or tool (of the one
// named), or of strict tools under auto (every call the model starts valid under its schema); nil otherwise.
func parseTools(tools, choice json.RawMessage) (render []byte, parse, parallel bool, forced *ports.Constraint, err error) {
	mode, named, parallel := "auto", "", true
	if !isNull(choice) {
		var c struct {
			Type                   *string `json:"type"`
			Name                   *string `json:"name"`
			DisableParallelToolUse *bool   `json:"disable_parallel_tool_use"`
		}
		if json.Unmarshal(choice, &c) != nil {
			return nil, false, false, nil, invalid("tool_choice", "must be an object with a type")
		}
		if c.Type == nil {
			return nil, false, false, nil, invalid("tool_choice.type", "field required")
		}
		switch *c.Type {
		case "auto", "none":
			mode = *c.Type
		case "any":
			mode = "any"
		case "tool":
			if c.Name == nil || *c.Name == "" {
				return nil, false, false, nil, invalid("tool_choice.name", "field required")
			}
			mode, named = "tool", *c.Name
		default:
			return nil, false, false, nil, invalid("tool_choice.type", "must be \"auto\", \"any\", \"tool\" or \"none\", not %q", *c.Type)
		}
		if c.DisableParallelToolUse != nil && *c.DisableParallelToolUse {
			parallel = false
		}
	}
	if isNull(tools) {
		if mode == "any" || mode == "tool" {
			return nil, false, false, nil, invalid("tool_choice", "type %q needs tools to call", mode)
		}
		return nil, false, parallel, nil, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(tools, &items) != nil {
		return nil, false, false, nil, invalid("tools", "must be an array of tool objects")
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	seen := map[string]int{}
	var defs []ports.ConstraintTool
	strict := false
	for i, it := range items {
		f := fmt.Sprintf("tools.%d", i)
		var t struct {
			Type        *string         `json:"type"`
			Name        *string         `json:"name"`
			Description *string         `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
			Strict      *bool           `json:"strict"`
		}
		if json.Unmarshal(it, &t) != nil {
			return nil, false, false, nil, invalid(f, "must be an object with a name and an input_schema")
		}
		switch {
		case t.Type != nil && *t.Type != "custom":
			return nil, false, false, nil, unsupported(f+".type", fmt.Sprintf("server tools such as %q are not available; declare custom tools with a name and an input_schema", *t.Type))
		case t.Name == nil:
			return nil, false, false, nil, invalid(f+".name", "field required")
		case !toolName.MatchString(*t.Name):
			return nil, false, false, nil, invalid(f+".name", "%q must be 1 to 64 letters, digits, underscores or dashes", *t.Name)
		case isNull(t.InputSchema):
			return nil, false, false, nil, invalid(f+".input_schema", "field required")
		case !bytes.HasPrefix(bytes.TrimSpace(t.InputSchema), []byte("{")):
			return nil, false, false, nil, invalid(f+".input_schema", "must be a JSON Schema object")
		}
		if j, dup := seen[*t.Name]; dup {
			return nil, false, false, nil, invalid(f+".name", "%q is already the name of tools.%d; names must be unique", *t.Name, j)
		}
		seen[*t.Name] = i
		def := ports.ConstraintTool{Name: *t.Name, Parameters: bytes.TrimSpace(t.InputSchema), Strict: t.Strict != nil && *t.Strict}
		strict = strict || def.Strict
		defs = append(defs, def)
		if i > 0 {
			buf.WriteByte(',')
		}
		name, _ := marshal(*t.Name)
		buf.WriteString(`{"type":"function","function":{"name":`)
		buf.Write(name)
		if t.Description != nil {
			d, _ := marshal(*t.Description)
			buf.WriteString(`,"description":`)
			buf.Write(d)
		}
		buf.WriteString(`,"parameters":`)
		buf.Write(bytes.TrimSpace(t.InputSchema))
		buf.WriteString(`}}`)
	}
	buf.WriteByte(']')
	switch {
	case (mode == "any" || mode == "tool") && len(items) == 0:
		return nil, false, false, nil, invalid("tool_choice", "type %q needs tools to call", mode)
	case mode == "tool":
		j, ok := seen[named]
		if !ok {
			return nil, false, false, nil, invalid("tool_choice.name", "%q is not the name of any of the tools", named)
		}
		forced = &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Tools: defs[j : j+1], Parallel: parallel}
	case mode == "any":
		forced = &ports.Constraint{Kind: ports.ConstrainToolCall, Param: "tool_choice", Tools: defs, Parallel: parallel}
	case mode == "auto" && strict:
		forced = &ports.Constraint{Kind: ports.ConstrainStrictTools, Param: "tools", Tools: defs}
	}
	if len(items) == 0 || mode == "none" {
		// "none": the model is not shown tools it may not call, and nothing is parsed.
		return nil, false, parallel, nil, nil
	}
	return buf.Bytes(), true, parallel, forced, nil
}

// parseThinking reads thinking: {"type": "enabled", "budget_tokens": n} turns the template's thinking on,
// {"type": "disabled"} off; absent leaves the model's default. The budget is checked as Anthropic checks it
// (at least 1024 and below max_tokens) but not enforced apart from max_tokens, which bounds reasoning and
// answer together.
func parseThinking(raw json.RawMessage, maxTokens *int) (*bool, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t struct {
		Type         *string `json:"type"`
		BudgetTokens *int    `json:"budget_tokens"`
	}
	if json.Unmarshal(raw, &t) != nil {
		return nil, invalid("thinking", "must be an object with a type")
	}
	if t.Type == nil {
		return nil, invalid("thinking.type", "field required")
	}
	on := false
	switch *t.Type {
	case "disabled":
	case "enabled":
		on = true
		switch {
		case t.BudgetTokens == nil:
			return nil, invalid("thinking.budget_tokens", "field required")
		case *t.BudgetTokens < minThinkingBudget:
			return nil, invalid("thinking.budget_tokens", "must be at least %d, not %d", minThinkingBudget, *t.BudgetTokens)
		case maxTokens != nil && *t.BudgetTokens >= *maxTokens:
			return nil, invalid("thinking.budget_tokens", "must be less than max_tokens (%d), not %d", *maxTokens, *t.BudgetTokens)
		}
	default:
		return nil, invalid("thinking.type", "must be \"enabled\" or \"disabled\", not %q", *t.Type)
	}
	return &on, nil
}
