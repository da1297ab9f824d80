package grammar

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// SchemaError is a schema higgs cannot constrain decoding to: a keyword outside the supported subset, or a
// document that is not a valid JSON Schema. Keyword names the keyword at fault ("" when none is); Path is
// the JSON pointer of the schema object holding it.
type SchemaError struct {
	Keyword string
	Path    string
	Msg     string
}

func (e *SchemaError) Error() string {
	where := "#" + e.Path
	if e.Keyword != "" {
		return fmt.Sprintf("%s at %s: %s", e.Keyword, where, e.Msg)
	}
	return fmt.Sprintf("at %s: %s", where, e.Msg)
}

// maxEnum bounds an enum (each step of a literal scans the values).
const maxEnum = 4096

// annotations are keywords that describe a schema without constraining its instances: accepted and ignored.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	// format values are generated as plain strings (the subset says so); the validator does not assert them.
	"format": true,
}

// supported are the constraining keywords the compiler implements.
var supported = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true, "enum": true,
	"const": true, "items": true, "minItems": true, "maxItems": true, "anyOf": true, "$ref": true,
	"$defs": true, "definitions": true, "minimum": true, "maximum": true, "minLength": true, "maxLength": true,
}

// compiler turns one schema document into nodes.
type compiler struct {
	ctx    context.Context
	root   any
	byPath map[string]*node
	refs   []*node
	reg    *registry
	// compiled counts the schema objects compiled, for the looks at ctx.
	compiled int
}

// registry numbers the nodes of one grammar (the numbers key the mask cache, so documents compiled into one
// grammar, such as several tools' schemas, must share it).
type registry struct {
	nodes []*node
}

func (r *registry) newNode(k kind) *node {
	n := &node{id: len(r.nodes), kind: k, maxItems: -1, maxLen: -1}
	r.nodes = append(r.nodes, n)
	return n
}

// CompileSchema compiles a JSON Schema document (the supported subset, see the README) to a grammar whose
// language is the JSON texts valid under it. A document over a size limit (MaxSchemaBytes, MaxSchemaObjects,
// MaxProperties) is a *LimitError, found before anything is compiled; the compile looks at ctx as it goes
// and returns its error (wrapped) once it is done.
func CompileSchema(ctx context.Context, doc []byte) (*Grammar, error) {
	reg := &registry{}
	n, err := compileSchemaNode(ctx, reg, doc, &budget{})
	if err != nil {
		return nil, err
	}
	return newGrammar(reg, n), nil
}

// compileSchemaNode compiles doc into reg, counting it against b.
func compileSchemaNode(ctx context.Context, reg *registry, doc []byte, b *budget) (*node, error) {
	if err := b.addBytes(len(doc)); err != nil {
		return nil, err
	}
	root, err := decodeOrdered(doc)
	if err != nil {
		return nil, &SchemaError{Msg: fmt.Sprintf("not a JSON document: %v", err)}
	}
	if err := b.addTree("", root); err != nil {
		return nil, err
	}
	if err := canceled(ctx); err != nil {
		return nil, err
	}
	c := &compiler{ctx: ctx, root: root, byPath: map[string]*node{}, reg: reg}
	n, err := c.compile("", root)
	if err != nil {
		return nil, err
	}
	if err := c.resolve(); err != nil {
		return nil, err
	}
	if err := canceled(ctx); err != nil {
		return nil, err
	}
	if err := metaValidate(doc); err != nil {
		return nil, err
	}
	if err := canceled(ctx); err != nil {
		return nil, err
	}
	if n, err = c.finish(n); err != nil {
		return nil, err
	}
	if err := checkProductive(n, reg.nodes); err != nil {
		return nil, err
	}
	if err := checkWidth(n); err != nil {
		return nil, err
	}
	return n, nil
}

// canceled is ctx's error, wrapped, once it is done.
func canceled(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("grammar: compile stopped: %w", err)
	}
	return nil
}

func (c *compiler) newNode(k kind) *node { return c.reg.newNode(k) }

// anyValue is a fresh node matching any JSON value.
func (c *compiler) anyValue() *node { return c.reg.anyValue() }

// anyValue is a fresh node matching any JSON value (a free object's values are its items).
func (r *registry) anyValue() *node {
	obj := r.newNode(kObject)
	obj.free = true
	arr := r.newNode(kArray)
	alt := r.newNode(kAlt)
	arr.items, obj.items = alt, alt
	str := r.newNode(kString)
	num := r.newNode(kNumber)
	lit := r.newNode(kLiteral)
	lit.lits = []string{"false", "null", "true"}
	alt.alts = []*node{obj, arr, str, num, lit}
	return alt
}

func (c *compiler) compile(path string, v any) (*node, error) {
	if n, ok := c.byPath[path]; ok {
		return n, nil
	}
	if c.compiled++; c.compiled%ctxEveryObjects == 0 {
		if err := canceled(c.ctx); err != nil {
			return nil, err
		}
	}
	n, err := c.compileNew(path, v)
	if err != nil {
		return nil, err
	}
	if n.path == "" {
		n.path = path
	}
	c.byPath[path] = n
	return n, nil
}

func (c *compiler) compileNew(path string, v any) (*node, error) {
	switch s := v.(type) {
	case bool:
		if !s {
			return nil, &SchemaError{Path: path, Msg: "the schema false matches nothing"}
		}
		return c.anyValue(), nil
	case *object:
		return c.compileObject(path, s)
	}
	return nil, &SchemaError{Path: path, Msg: "a schema must be an object or a boolean"}
}

func (c *compiler) compileObject(path string, s *object) (*node, error) {
	for _, k := range s.keys {
		if !annotations[k] && !supported[k] {
			return nil, &SchemaError{Keyword: k, Path: path, Msg: "keyword not supported by constrained decoding"}
		}
	}
	if path != "" {
		for _, k := range []string{"$defs", "definitions"} {
			if _, ok := s.get(k); ok {
				return nil, &SchemaError{Keyword: k, Path: path, Msg: "only the root schema may hold definitions"}
			}
		}
	} else {
		// Definitions are compiled whether referenced or not, so an unsupported keyword is reported wherever it is.
		for _, k := range []string{"$defs", "definitions"} {
			d, ok := s.get(k)
			if !ok {
				continue
			}
			defs, ok := d.(*object)
			if !ok {
				return nil, &SchemaError{Keyword: k, Path: path, Msg: "must be an object"}
			}
			for _, name := range defs.keys {
				if _, err := c.compile(path+"/"+k+"/"+escapePointer(name), defs.vals[name]); err != nil {
					return nil, err
				}
			}
		}
	}
	if ref, ok := s.get("$ref"); ok {
		for _, k := range s.keys {
			if k != "$ref" && k != "$defs" && k != "definitions" && !annotations[k] {
				return nil, &SchemaError{Keyword: k, Path: path, Msg: "not supported beside $ref"}
			}
		}
		uri, ok := ref.(string)
		if !ok || !strings.HasPrefix(uri, "#") {
			return nil, &SchemaError{Keyword: "$ref", Path: path, Msg: fmt.Sprintf("only references inside the document (#, #/$defs/…) are supported, got %v", ref)}
		}
		n := c.newNode(kRef)
		n.refURI = uri
		c.refs = append(c.refs, n)
		return n, nil
	}
	if enum, ok := s.get("enum"); ok {
		vals, ok := enum.([]any)
		if !ok || len(vals) == 0 {
			return nil, &SchemaError{Keyword: "enum", Path: path, Msg: "must be a non-empty array"}
		}
		if len(vals) > maxEnum {
			return nil, &SchemaError{Keyword: "enum", Path: path, Msg: fmt.Sprintf("%d values; at most %d are supported", len(vals), maxEnum)}
		}
		return c.literals(path, "enum", s, vals)
	}
	if cv, ok := s.get("const"); ok {
		return c.literals(path, "const", s, []any{cv})
	}
	if alts, ok := s.get("anyOf"); ok {
		for _, k := range s.keys {
			if k != "anyOf" && !annotations[k] && k != "$defs" && k != "definitions" {
				return nil, &SchemaError{Keyword: k, Path: path, Msg: "not supported beside anyOf (move it into each alternative)"}
			}
		}
		list, ok := alts.([]any)
		if !ok || len(list) == 0 {
			return nil, &SchemaError{Keyword: "anyOf", Path: path, Msg: "must be a non-empty array"}
		}
		n := c.newNode(kAlt)
		for i, a := range list {
			an, err := c.compile(fmt.Sprintf("%s/anyOf/%d", path, i), a)
			if err != nil {
				return nil, err
			}
			n.alts = append(n.alts, an)
		}
		return n, nil
	}
	types, err := typesOf(path, s)
	if err != nil {
		return nil, err
	}
	if len(types) == 1 {
		return c.typed(path, s, types[0])
	}
	n := c.newNode(kAlt)
	for _, t := range types {
		tn, err := c.typed(path, s, t)
		if err != nil {
			return nil, err
		}
		n.alts = append(n.alts, tn)
	}
	return n, nil
}

var typeNames = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

// typesOf lists the JSON types a schema object allows: its "type", or what its keywords imply.
func typesOf(path string, s *object) ([]string, error) {
	t, ok := s.get("type")
	if !ok {
		has := func(ks ...string) bool {
			for _, k := range ks {
				if _, ok := s.get(k); ok {
					return true
				}
			}
			return false
		}
		switch {
		case has("properties", "required", "additionalProperties"):
			return []string{"object"}, nil
		case has("items", "minItems", "maxItems"):
			return []string{"array"}, nil
		case has("minLength", "maxLength"):
			return []string{"string"}, nil
		case has("minimum", "maximum"):
			return []string{"number"}, nil
		}
		return slices.Clone(typeNames), nil
	}
	var names []string
	switch tv := t.(type) {
	case string:
		names = []string{tv}
	case []any:
		for _, e := range tv {
			sv, ok := e.(string)
			if !ok {
				return nil, &SchemaError{Keyword: "type", Path: path, Msg: "must be a type name or an array of them"}
			}
			names = append(names, sv)
		}
	default:
		return nil, &SchemaError{Keyword: "type", Path: path, Msg: "must be a type name or an array of them"}
	}
	if len(names) == 0 {
		return nil, &SchemaError{Keyword: "type", Path: path, Msg: "must not be empty"}
	}
	for _, nm := range names {
		if !slices.Contains(typeNames, nm) {
			return nil, &SchemaError{Keyword: "type", Path: path, Msg: fmt.Sprintf("unknown type %q", nm)}
		}
	}
	// "number" already admits every integer.
	if slices.Contains(names, "number") {
		names = slices.DeleteFunc(names, func(s string) bool { return s == "integer" })
	}
	return names, nil
}

// literals compiles enum/const: the canonical texts of the values that have one of the schema's types.
func (c *compiler) literals(path, kw string, s *object, vals []any) (*node, error) {
	var types []string
	if _, ok := s.get("type"); ok {
		var err error
		if types, err = typesOf(path, s); err != nil {
			return nil, err
		}
	}
	n := c.newNode(kLiteral)
	for _, v := range vals {
		if types != nil && !slices.ContainsFunc(types, func(t string) bool { return hasType(v, t) }) {
			continue
		}
		n.lits = append(n.lits, canonical(v))
	}
	slices.Sort(n.lits)
	n.lits = slices.Compact(n.lits)
	if len(n.lits) == 0 {
		return nil, &SchemaError{Keyword: kw, Path: path, Msg: "no value has the schema's type"}
	}
	return n, nil
}

func hasType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case *object:
		return t == "object"
	case json.Number:
		if t == "number" {
			return true
		}
		r, ok := new(big.Rat).SetString(x.String())
		return t == "integer" && ok && r.IsInt()
	}
	return false
}

// typed compiles schema s restricted to JSON type t.
func (c *compiler) typed(path string, s *object, t string) (*node, error) {
	switch t {
	case "null", "boolean":
		n := c.newNode(kLiteral)
		n.lits = []string{"null"}
		if t == "boolean" {
			n.lits = []string{"false", "true"}
		}
		return n, nil
	case "string":
		n := c.newNode(kString)
		var err error
		if n.minLen, err = count(path, s, "minLength", 0); err != nil {
			return nil, err
		}
		if n.maxLen, err = count(path, s, "maxLength", -1); err != nil {
			return nil, err
		}
		if n.maxLen >= 0 && n.minLen > n.maxLen {
			return nil, &SchemaError{Keyword: "minLength", Path: path, Msg: "above maxLength: no string fits"}
		}
		return n, nil
	case "number", "integer":
		return c.number(path, s, t == "integer")
	case "array":
		return c.array(path, s)
	}
	return c.object(path, s)
}

func count(path string, s *object, kw string, def int) (int, error) {
	v, ok := s.get(kw)
	if !ok {
		return def, nil
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, &SchemaError{Keyword: kw, Path: path, Msg: "must be a non-negative integer"}
	}
	i, err := strconv.Atoi(num.String())
	if err != nil || i < 0 || i > 1<<20 {
		return 0, &SchemaError{Keyword: kw, Path: path, Msg: "must be a non-negative integer (at most 1048576)"}
	}
	return i, nil
}

func (c *compiler) number(path string, s *object, integer bool) (*node, error) {
	n := c.newNode(kNumber)
	n.integer = integer
	for _, kw := range []string{"minimum", "maximum"} {
		v, ok := s.get(kw)
		if !ok {
			continue
		}
		num, ok := v.(json.Number)
		if !ok {
			return nil, &SchemaError{Keyword: kw, Path: path, Msg: "must be a number"}
		}
		r, ok := new(big.Rat).SetString(num.String())
		if !ok || len(num.String()) > 64 {
			return nil, &SchemaError{Keyword: kw, Path: path, Msg: "must be a plain number of at most 64 characters"}
		}
		if integer {
			r = roundInt(r, kw == "minimum")
		}
		if kw == "minimum" {
			n.min = r
		} else {
			n.max = r
		}
	}
	if n.min != nil && n.max != nil && n.min.Cmp(n.max) > 0 {
		return nil, &SchemaError{Keyword: "minimum", Path: path, Msg: "above maximum: no number fits"}
	}
	if !reachable(n) {
		return nil, &SchemaError{Keyword: "maximum", Path: path, Msg: fmt.Sprintf("no number of at most %d digits fits the bounds", maxIntDigits)}
	}
	return n, nil
}

// roundInt rounds a bound to the integers it admits: a minimum up, a maximum down.
func roundInt(r *big.Rat, up bool) *big.Rat {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	// DivMod is Euclidean: q = floor(r) for a positive denominator.
	if up && m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return new(big.Rat).SetInt(q)
}

func (c *compiler) array(path string, s *object) (*node, error) {
	n := c.newNode(kArray)
	var err error
	if n.minItems, err = count(path, s, "minItems", 0); err != nil {
		return nil, err
	}
	if n.maxItems, err = count(path, s, "maxItems", -1); err != nil {
		return nil, err
	}
	if n.maxItems >= 0 && n.minItems > n.maxItems {
		return nil, &SchemaError{Keyword: "minItems", Path: path, Msg: "above maxItems: no array fits"}
	}
	items, ok := s.get("items")
	switch {
	case !ok:
		n.items = c.anyValue()
	case items == false:
		if n.minItems > 0 {
			return nil, &SchemaError{Keyword: "items", Path: path, Msg: "false with minItems > 0: no array fits"}
		}
		n.maxItems = 0
		n.items = c.anyValue()
	default:
		if _, isArr := items.([]any); isArr {
			return nil, &SchemaError{Keyword: "items", Path: path, Msg: "an array of schemas (tuple validation) is not supported; use one schema"}
		}
		if n.items, err = c.compile(path+"/items", items); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (c *compiler) object(path string, s *object) (*node, error) {
	n := c.newNode(kObject)
	closed := false
	if ap, ok := s.get("additionalProperties"); ok {
		switch v := ap.(type) {
		case bool:
			closed = !v
		case *object:
			if len(v.keys) != 0 {
				return nil, &SchemaError{Keyword: "additionalProperties", Path: path, Msg: "only false (or true) is supported, not a schema"}
			}
		default:
			return nil, &SchemaError{Keyword: "additionalProperties", Path: path, Msg: "must be false or true"}
		}
	}
	var required []string
	if r, ok := s.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return nil, &SchemaError{Keyword: "required", Path: path, Msg: "must be an array of property names"}
		}
		for _, e := range list {
			name, ok := e.(string)
			if !ok {
				return nil, &SchemaError{Keyword: "required", Path: path, Msg: "must be an array of property names"}
			}
			if !slices.Contains(required, name) {
				required = append(required, name)
			}
		}
	}
	props, hasProps := s.get("properties")
	if hasProps {
		po, ok := props.(*object)
		if !ok {
			return nil, &SchemaError{Keyword: "properties", Path: path, Msg: "must be an object"}
		}
		for _, name := range po.keys {
			vn, err := c.compile(path+"/properties/"+escapePointer(name), po.vals[name])
			if err != nil {
				return nil, err
			}
			n.props = append(n.props, prop{name: name, key: quote(name), value: vn, required: slices.Contains(required, name)})
		}
	}
	for _, name := range required {
		if slices.ContainsFunc(n.props, func(p prop) bool { return p.name == name }) {
			continue
		}
		if closed {
			return nil, &SchemaError{Keyword: "required", Path: path, Msg: fmt.Sprintf("%q is required but not a property, and additionalProperties is false", name)}
		}
		n.props = append(n.props, prop{name: name, key: quote(name), value: c.anyValue(), required: true})
	}
	// An open object without declared properties is any object; with them, only the declared ones are
	// generated (a valid instance either way).
	if n.free = !closed && len(n.props) == 0; n.free {
		n.items = c.anyValue()
	}
	return n, nil
}
