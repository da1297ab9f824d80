// Package grammar is higgs's constrained decoding: a JSON Schema subset (or "any JSON object", or a tool-call
// wrapper around one) compiled to a pushdown automaton over bytes, and the automaton to the set of token ids
// of a byte-level BPE vocabulary that may come next at each position (a trie walk over the vocabulary's byte
// strings, cached per automaton state). It is pure: no model, no I/O.
//
// The automaton's states are immutable values: advancing never changes a State, so a decoder can keep one
// per position and roll back by dropping the newer ones.
package grammar

import "math/big"

// kind is what a node matches.
type kind uint8

const (
	kObject  kind = iota + 1 // an object with declared properties (in order), or any keys (free)
	kArray                   // an array of items
	kString                  // a JSON string, optionally length-bounded
	kNumber                  // a JSON number (integer: no fraction or exponent), optionally bounded
	kLiteral                 // one of a set of byte strings (enum, const, true/false/null, object keys)
	kAlt                     // one of several nodes (anyOf, type arrays, any JSON value)
	kRef                     // a reference resolved at compile time to another node
	kSeq                     // a sequence of literal bytes, values and free text, optionally repeated
	kText                    // free text in which each occurrence of trigger continues with then
)

// node is one compiled schema (or grammar part). Nodes form a graph (recursive $refs make cycles); they are
// immutable once compiled.
type node struct {
	id   int
	kind kind
	// path is the JSON pointer of the schema it was compiled from (for errors found after compilation).
	path string

	// kObject: props in declaration order; free means any string keys with any JSON values.
	props []prop
	free  bool

	// kArray: items (nil: any value); maxItems < 0: unbounded.
	items              *node
	minItems, maxItems int

	// kString: length bounds in code points (maxLen < 0: unbounded).
	minLen, maxLen int

	// kNumber.
	integer  bool
	min, max *big.Rat // nil: unbounded

	// kLiteral: the byte strings (distinct, sorted).
	lits []string

	// kAlt: the alternatives (after compilation, none is a kAlt or kRef).
	alts []*node

	// kRef: the target (resolved after the whole document is read).
	ref    *node
	refURI string

	// kSeq: the parts in order; repeatSep non-empty means the whole sequence may repeat after that separator,
	// maxRepeat (when positive) times in all (a frame's hi counts the repeats done).
	parts     []part
	repeatSep string
	maxRepeat int

	// kText.
	trigger string
	then    *node
}

// prop is one declared object property.
type prop struct {
	name     string
	key      string // the quoted JSON key as generated (`"name"`)
	value    *node
	required bool
}

// part is one element of a kSeq: exactly one of lit (literal bytes), value (a node) and until (free text
// ending with, and including, this terminator) is set.
type part struct {
	lit   string
	value *node
	until string
}
