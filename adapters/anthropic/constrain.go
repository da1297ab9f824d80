package anthropic

import (
	"bytes"
	"encoding/json"

	"github.com/higgs-go/higgs/ports"
)

// parseOutputFormat reads structured outputs: output_config.format (or the deprecated top-level
// output_format), {"type": "json_schema", "schema": {...}}. The schema is compiled by the Generator, which
// names an unsupported keyword in its 400.
func parseOutputFormat(config, deprecated json.RawMessage) (*ports.Constraint, error) {
	field, raw := "output_format", deprecated
	if !isNull(config) {
		if !isNull(deprecated) {
			return nil, invalid("output_format", "send output_config.format or the deprecated output_format, not both")
		}
		var oc map[string]json.RawMessage
		if json.Unmarshal(config, &oc) != nil {
			return nil, invalid("output_config", "must be an object")
		}
		for k, v := range oc {
			switch {
			case k == "format":
			case k == "effort":
				// "high" is Anthropic's default, and the only effort higgs runs at.
				if !isNull(v) && !rawIsString(v, "high") {
					return nil, unsupported("output_config.effort", "effort levels are not implemented (the model runs as at \"high\"); set thinking instead")
				}
			case k == "task_budget":
				if !isNull(v) {
					return nil, unsupported("output_config.task_budget", "task budgets are not implemented; set max_tokens")
				}
			default:
				return nil, invalid("output_config."+k, "Extra inputs are not permitted")
			}
		}
		field, raw = "output_config.format", oc["format"]
	}
	if isNull(raw) {
		return nil, nil
	}
	var f struct {
		Type   *string         `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return nil, invalid(field, "must be an object with a type and a schema")
	}
	switch {
	case f.Type == nil:
		return nil, invalid(field+".type", "field required")
	case *f.Type != "json_schema":
		return nil, invalid(field+".type", "must be \"json_schema\", not %q", *f.Type)
	case isNull(f.Schema):
		return nil, invalid(field+".schema", "field required")
	case !bytes.HasPrefix(bytes.TrimSpace(f.Schema), []byte("{")):
		return nil, invalid(field+".schema", "must be a JSON Schema object")
	}
	return &ports.Constraint{Kind: ports.ConstrainJSONSchema, Param: field, Schema: bytes.TrimSpace(f.Schema)}, nil
}

// rawIsString reports whether r is the JSON string want.
func rawIsString(r json.RawMessage, want string) bool {
	var s string
	return json.Unmarshal(r, &s) == nil && s == want
}
