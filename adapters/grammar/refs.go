package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// resolve points every $ref at its target, compiling targets not compiled yet (which may add refs).
func (c *compiler) resolve() error {
	for i := 0; i < len(c.refs); i++ {
		r := c.refs[i]
		path := strings.TrimPrefix(r.refURI, "#")
		if path != "" && !strings.HasPrefix(path, "/") {
			return &SchemaError{Keyword: "$ref", Msg: fmt.Sprintf("%q: anchors are not supported; use a JSON pointer such as #/$defs/Name", r.refURI)}
		}
		target, err := c.lookup(path)
		if err != nil {
			return &SchemaError{Keyword: "$ref", Msg: fmt.Sprintf("%q: %v", r.refURI, err)}
		}
		if r.ref, err = c.compile(canonicalPath(path), target); err != nil {
			return err
		}
	}
	return nil
}

func canonicalPath(p string) string {
	if p == "" {
		return ""
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = escapePointer(unescapePointer(t))
	}
	return "/" + strings.Join(toks, "/")
}

// lookup follows a JSON pointer from the document's root.
func (c *compiler) lookup(path string) (any, error) {
	v := c.root
	if path == "" {
		return v, nil
	}
	for _, tok := range strings.Split(path[1:], "/") {
		tok = unescapePointer(tok)
		switch t := v.(type) {
		case *object:
			nv, ok := t.get(tok)
			if !ok {
				return nil, fmt.Errorf("no %q in the document", tok)
			}
			v = nv
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(t) {
				return nil, fmt.Errorf("no element %q in the document", tok)
			}
			v = t[i]
		default:
			return nil, errors.New("the pointer leads outside the document")
		}
	}
	return v, nil
}

// finish replaces references by their targets and flattens alternatives, refusing cycles that would match
// without consuming anything ($ref loops, anyOf containing itself).
func (c *compiler) finish(root *node) (*node, error) {
	for _, n := range c.reg.nodes {
		for i := range n.props {
			t, err := deref(n.props[i].value)
			if err != nil {
				return nil, err
			}
			n.props[i].value = t
		}
		if n.items != nil {
			t, err := deref(n.items)
			if err != nil {
				return nil, err
			}
			n.items = t
		}
	}
	for _, n := range c.reg.nodes {
		if n.kind == kAlt {
			flat, err := flatten(n, map[*node]bool{})
			if err != nil {
				return nil, err
			}
			if len(flat) > maxAlternatives {
				return nil, &SchemaError{Keyword: "anyOf", Msg: fmt.Sprintf("%d alternatives; at most %d are supported (each one is matched in parallel)", len(flat), maxAlternatives)}
			}
			n.alts = flat
		}
	}
	return deref(root)
}

// maxAlternatives bounds an anyOf (after flattening): every alternative alive is a stack the automaton
// carries through each byte of the mask computation.
const maxAlternatives = 64

// deref follows references to a node that matches something itself.
func deref(n *node) (*node, error) {
	seen := map[*node]bool{}
	for n.kind == kRef {
		if seen[n] {
			return nil, &SchemaError{Keyword: "$ref", Msg: fmt.Sprintf("%q is a cycle of references", n.refURI)}
		}
		seen[n] = true
		n = n.ref
	}
	return n, nil
}

func flatten(n *node, visiting map[*node]bool) ([]*node, error) {
	if visiting[n] {
		return nil, &SchemaError{Keyword: "anyOf", Msg: "an alternative refers back to its own anyOf without consuming input"}
	}
	visiting[n] = true
	defer delete(visiting, n)
	var out []*node
	for _, a := range n.alts {
		a, err := deref(a)
		if err != nil {
			return nil, err
		}
		if a.kind != kAlt {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
			continue
		}
		sub, err := flatten(a, visiting)
		if err != nil {
			return nil, err
		}
		for _, s := range sub {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
