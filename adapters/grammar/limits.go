package grammar

import (
	"errors"
	"fmt"
)

// maxStacks bounds the stacks a state carries (and the trie walk carries under a prefix): every stack is
// fed every byte of every token a mask computation tries, so the cost of a mask grows with their number.
// Nested anyOfs multiply (their stacks differ below, so they never merge); CompileSchema refuses schemas
// whose alternatives multiply past it (checkWidth) and a state that still outgrows it (recursion) is dead
// with a *StackLimitError.
const maxStacks = 1024

// ErrTooManyStacks is what a *StackLimitError wraps.
var ErrTooManyStacks = errors.New("grammar: too many undecided alternatives")

// StackLimitError says the output so far leaves more alternatives of the schema open than constrained
// decoding follows at once.
type StackLimitError struct {
	Stacks int
}

func (e *StackLimitError) Error() string {
	return fmt.Sprintf("%v: %d open at once, at most %d are followed (simplify nested anyOf)", ErrTooManyStacks, e.Stacks, maxStacks)
}

func (e *StackLimitError) Unwrap() error { return ErrTooManyStacks }

// checkWidth refuses a grammar in which nested alternatives could leave more than maxStacks stacks open:
// width(n) bounds the stacks a value of n keeps alive at once (an anyOf the sum of its alternatives', a
// container the widest of its children's). A reference back to a node being measured counts as one, so
// recursion is left to the runtime limit (a recursive alternative is usually decided by its first byte).
func checkWidth(root *node) error {
	w := map[*node]int{}
	onPath := map[*node]bool{}
	var width func(n *node) (int, error)
	width = func(n *node) (int, error) {
		if n == nil || onPath[n] {
			return 1, nil
		}
		if v, ok := w[n]; ok {
			return v, nil
		}
		onPath[n] = true
		defer delete(onPath, n)
		widest := func(ns ...*node) (int, error) {
			m := 1
			for _, c := range ns {
				v, err := width(c)
				if err != nil {
					return 0, err
				}
				m = max(m, v)
			}
			return m, nil
		}
		var v int
		var err error
		switch n.kind {
		case kAlt:
			for _, a := range n.alts {
				av, err := width(a)
				if err != nil {
					return 0, err
				}
				v += av
			}
			if v > maxStacks {
				return 0, &SchemaError{Keyword: "anyOf", Path: n.path, Msg: fmt.Sprintf("nested alternatives (through properties, items and $ref) multiply to %d open at once; at most %d are supported", v, maxStacks)}
			}
		case kObject:
			ns := []*node{n.items}
			for _, p := range n.props {
				ns = append(ns, p.value)
			}
			v, err = widest(ns...)
		case kArray:
			v, err = widest(n.items)
		case kSeq:
			var ns []*node
			for _, p := range n.parts {
				ns = append(ns, p.value)
			}
			v, err = widest(ns...)
		case kText:
			v, err = widest(n.then)
		case kRef:
			v, err = widest(n.ref)
		default:
			v = 1
		}
		if err != nil {
			return 0, err
		}
		w[n] = v
		return v, nil
	}
	_, err := width(root)
	return err
}

// Limits on what one request may ask to compile. A schema's compile is linear in its size, but a mask's walk
// feeds every candidate key of an object to every token that could start one, so a request of a few hundred
// kilobytes could otherwise cost minutes of CPU (20,000 optional properties: 148 s). They are checked on the
// decoded document before anything is compiled, so a refusal costs a parse.
const (
	// MaxSchemaBytes bounds a constraint's schema text: a response format's schema, or the parameters of
	// all the tools of a tool set together.
	MaxSchemaBytes = 256 << 10
	// MaxSchemaObjects bounds the JSON objects of a constraint's schemas together (each schema, each
	// properties map, each object inside an enum): the nodes a compile builds.
	MaxSchemaObjects = 8192
	// MaxProperties bounds the members of one JSON object of a schema (the properties of one object, the
	// definitions of $defs): a mask computed inside an object's keys tries each remaining optional one.
	MaxProperties = 256
	// MaxTools bounds the tools a forced or strict tool call chooses among (OpenAI's limit on tools).
	MaxTools = 128
)

// ErrTooLarge is what a *LimitError wraps.
var ErrTooLarge = errors.New("grammar: schema over a size limit")

// LimitError is a schema or tool set larger than a limit above: What names the limit, Path (a JSON
// pointer into the schema, "" for the whole) where it was passed, N the size found and Max the limit.
type LimitError struct {
	What   string
	Path   string
	N, Max int
}

func (e *LimitError) Error() string {
	where := ""
	if e.Path != "" {
		where = " at #" + e.Path
	}
	return fmt.Sprintf("%s%s: %d, over the limit of %d", e.What, where, e.N, e.Max)
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// budget is what the documents of one constraint have used of the limits so far (the tools of a tool set
// share one).
type budget struct {
	bytes, objects int
}

// addBytes counts a document's bytes against MaxSchemaBytes.
func (b *budget) addBytes(n int) error {
	b.bytes += n
	if b.bytes > MaxSchemaBytes {
		return &LimitError{What: "schema bytes", N: b.bytes, Max: MaxSchemaBytes}
	}
	return nil
}

// addTree counts a decoded document's objects against MaxSchemaObjects and checks every object's members
// against MaxProperties.
func (b *budget) addTree(path string, v any) error {
	switch x := v.(type) {
	case *object:
		if len(x.keys) > MaxProperties {
			return &LimitError{What: "members of one schema object (properties, $defs…)", Path: path, N: len(x.keys), Max: MaxProperties}
		}
		if b.objects++; b.objects > MaxSchemaObjects {
			return &LimitError{What: "schema objects", N: b.objects, Max: MaxSchemaObjects}
		}
		for _, k := range x.keys {
			if err := b.addTree(path+"/"+escapePointer(k), x.vals[k]); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := b.addTree(fmt.Sprintf("%s/%d", path, i), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// ctxEveryObjects is how many schema objects a compile compiles between looks at its context.
const ctxEveryObjects = 64
