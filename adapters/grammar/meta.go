package grammar

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ValidateSchema checks doc against the size limits and the JSON Schema meta-schema only: whether it is a
// schema at all, not whether the subset can express it (a lenient tool's schema).
func ValidateSchema(doc []byte) error {
	b := &budget{}
	if err := b.addBytes(len(doc)); err != nil {
		return err
	}
	root, err := decodeOrdered(doc)
	if err != nil {
		return &SchemaError{Msg: fmt.Sprintf("not a JSON document: %v", err)}
	}
	if err := b.addTree("", root); err != nil {
		return err
	}
	return metaValidate(doc)
}

// metaValidate checks the document against the JSON Schema meta-schema (draft 2020-12 unless it names
// another with $schema), which catches what the subset check does not look at (a "type" that is not a type
// name, a negative minItems…).
func metaValidate(doc []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return &SchemaError{Msg: fmt.Sprintf("not a JSON document: %v", err)}
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("urn:higgs:schema", v); err != nil {
		return &SchemaError{Msg: fmt.Sprintf("invalid JSON Schema: %v", err)}
	}
	if _, err := c.Compile("urn:higgs:schema"); err != nil {
		return &SchemaError{Msg: fmt.Sprintf("invalid JSON Schema: %v", oneLine(err))}
	}
	return nil
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
