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
