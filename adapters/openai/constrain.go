package openai

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// parseResponseFormat reads response_format: {"type":"text"} (or absent) is free text, {"type":"json_object"}
// any JSON object, and {"type":"json_schema","json_schema":{"name","schema","strict"?,"description"?}} JSON
// valid under the schema. The schema itself is compiled by the Generator, which names an unsupported
// keyword in its 400.
func parseResponseFormat(raw json.RawMessage) (*ports.Constraint, error) {
	if isNull(raw) {
		return nil, nil
	}
	var rf struct {
		Type       string          `json:"type"`
		JSONSchema json.RawMessage `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, badRequest("response_format", "response_format must be an object with a type")
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &ports.Constraint{Kind: ports.ConstrainJSONObject, Param: "response_format"}, nil
	case "json_schema":
	default:
		return nil, badRequest("response_format", "response_format.type must be \"text\", \"json_object\" or \"json_schema\", not %q", rf.Type)
	}
	if isNull(rf.JSONSchema) {
		return nil, badRequest("response_format", "response_format.json_schema is required with type \"json_schema\"")
	}
	var js struct {
		Name        *string         `json:"name"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
		Description *string         `json:"description"`
	}
	if err := json.Unmarshal(rf.JSONSchema, &js); err != nil {
		return nil, badRequest("response_format", "response_format.json_schema must be an object with a name and a schema")
	}
	switch {
	case js.Name == nil:
		return nil, badRequest("response_format", "response_format.json_schema.name is required")
	case !toolName.MatchString(*js.Name):
		return nil, badRequest("response_format", "response_format.json_schema.name %q must be 1 to 64 letters, digits, underscores or dashes", *js.Name)
	}
	schema := bytes.TrimSpace(js.Schema)
	if isNull(js.Schema) {
		// OpenAI treats a missing schema as any JSON object.
		return &ports.Constraint{Kind: ports.ConstrainJSONObject, Param: "response_format"}, nil
	}
	if len(schema) == 0 || schema[0] != '{' {
		return nil, badRequest("response_format", "response_format.json_schema.schema must be a JSON Schema object, not %s", fmt.Sprintf("%.40s", schema))
	}
	// strict or not, the output is held to the schema: higgs has no weaker mode to offer.
	return &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: "response_format", Schema: schema}, nil
}
