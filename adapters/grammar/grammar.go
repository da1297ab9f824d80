package grammar

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Grammar is a compiled constraint. It is immutable and safe for concurrent use.
type Grammar struct {
	root *node
	reg  *registry
	// closeInfo is the shortest lengths of its nodes (close.go), computed on first use.
	closeInfo func() *closeInfo
}

func newGrammar(reg *registry, root *node) *Grammar {
	return &Grammar{root: root, reg: reg, closeInfo: sync.OnceValue(func() *closeInfo { return newCloseInfo(reg.nodes) })}
}

// State is the automaton after some bytes: the set of stacks still alive (several while anyOf alternatives
// are undecided). The zero State is dead. States are immutable values.
type State struct {
	stacks []*frame
	key    string
	// err is why the state is dead when it is not a forbidden byte (too many stacks).
	err error
}

// Start is the state before any byte.
func (g *Grammar) Start() State {
	root := &frame{}
	return newState(push(g.root, root, nil))
}

func newState(stacks []*frame) State {
	if len(stacks) == 0 {
		return State{}
	}
	// Equal stacks reached by different routes are merged, so the state's key (and its cached mask) does not
	// depend on the route.
	keys := make([]string, len(stacks))
	for i, f := range stacks {
		keys[i] = stackKey(f)
	}
	order := make([]int, len(stacks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	var out []*frame
	var sb strings.Builder
	last := ""
	for n, i := range order {
		if n > 0 && keys[i] == last {
			continue
		}
		last = keys[i]
		out = append(out, stacks[i])
		sb.WriteString(keys[i])
		sb.WriteByte(0xff) // stack keys never hold 0xff outside their length-prefixed buffers
	}
	return State{stacks: out, key: sb.String()}
}

// stackKey serialises a stack; two stacks with equal keys accept the same continuations.
func stackKey(f *frame) string {
	var b []byte
	for ; f != nil; f = f.up {
		id := int64(-2)
		if f.n != nil {
			id = int64(f.n.id)
		}
		b = binary.AppendVarint(b, id)
		b = append(b, f.ph, f.ws, f.lo, f.hi)
		b = binary.AppendVarint(b, int64(f.i))
		b = binary.AppendVarint(b, int64(f.j))
		b = binary.AppendUvarint(b, uint64(len(f.buf)))
		b = append(b, f.buf...)
	}
	return string(b)
}

// Dead reports whether no continuation is possible (a forbidden byte was fed, or Err says why not).
func (s State) Dead() bool { return len(s.stacks) == 0 }

// Err is why a dead state could not be computed (a *StackLimitError wrapping ErrTooManyStacks), nil for a
// live state or one a forbidden byte killed.
func (s State) Err() error { return s.err }

// Key identifies the state: equal keys mean equal futures (the mask cache's key).
func (s State) Key() string { return s.key }

// Accepting reports whether the text so far is a complete sentence of the grammar (EOS may follow).
func (s State) Accepting() bool {
	return slices.ContainsFunc(s.stacks, accepting)
}

// Advance returns the state after bytes (dead if any byte is forbidden).
// Past maxStacks live stacks the state is dead with Err set: the caller must end the generation rather than
// let one request's schema hold a core for minutes.
func (s State) Advance(bytes []byte) State {
	if s.err != nil {
		return s
	}
	cur := s.stacks
	for _, b := range bytes {
		var next []*frame
		for _, f := range cur {
			next = feed(f, b, next)
		}
		if len(next) == 0 {
			return State{}
		}
		if len(next) > maxStacks {
			return State{err: &StackLimitError{Stacks: len(next)}}
		}
		cur = next
	}
	if len(bytes) == 0 {
		return s
	}
	return newState(cur)
}

// JSONObject is the grammar of any JSON object (response_format json_object).
func JSONObject() *Grammar {
	reg := &registry{}
	n := reg.newNode(kObject)
	n.free = true
	n.items = reg.anyValue()
	return newGrammar(reg, n)
}

// Tool is one function a forced tool call may name.
type Tool struct {
	Name string
	// Parameters is its arguments' JSON Schema; nil means no parameters (the arguments are {}).
	Parameters []byte
}

// ToolCallSyntax is how the chat template writes a call: Open + {"name": …, "arguments": …} + Close, the
// Hermes / Qwen form adapters/toolcall parses.
type ToolCallSyntax struct {
	Open, Close string
	// Sep separates parallel calls.
	Sep string
}

// Hermes is the syntax of Qwen's and Hermes' templates.
var Hermes = ToolCallSyntax{Open: "<tool_call>\n", Close: "\n</tool_call>", Sep: "\n"}

// MaxParallelCalls bounds the calls of a parallel forced answer: a model that would repeat its call until
// max_tokens (a forced call never offers it the chance to answer instead) ends after this many
// (docs/http-api.md states the number).
const MaxParallelCalls = 4

// ToolCalls is the grammar of one call (or, when parallel, one to MaxParallelCalls) of the given tools, each
// call's arguments valid under its tool's schema. Once the call (or the last call allowed) is complete, only
// EOS may follow, so the answer ends there. A schema the subset cannot express is an error wrapping a
// *SchemaError, naming the tool; a tool set over a size limit (MaxTools, and the schema limits for all the
// tools' schemas together) a *LimitError. The compile looks at ctx as CompileSchema does.
func ToolCalls(ctx context.Context, tools []Tool, syntax ToolCallSyntax, parallel bool) (*Grammar, error) {
	reg := &registry{}
	call, err := callNode(ctx, reg, tools, syntax)
	if err != nil {
		return nil, err
	}
	if parallel {
		call.repeatSep, call.maxRepeat = syntax.Sep, MaxParallelCalls
	}
	return newGrammar(reg, call), nil
}

// StrictTools is the grammar of free text in which every tool call (from syntax.Open on) is a call of one of
// tools with valid arguments (strict tools the model may or may not call).
func StrictTools(ctx context.Context, tools []Tool, syntax ToolCallSyntax) (*Grammar, error) {
	reg := &registry{}
	call, err := callNode(ctx, reg, tools, syntax)
	if err != nil {
		return nil, err
	}
	call.parts = call.parts[1:] // the text node matches Open itself
	text := reg.newNode(kText)
	text.trigger, text.then = syntax.Open, call
	return newGrammar(reg, text), nil
}

// callNode is Open + {"name": NAME, "arguments": ARGS} + Close over tools.
func callNode(ctx context.Context, reg *registry, tools []Tool, syntax ToolCallSyntax) (*node, error) {
	if len(tools) == 0 {
		return nil, fmt.Errorf("grammar: no tools to call")
	}
	if len(tools) > MaxTools {
		return nil, &LimitError{What: "tools", N: len(tools), Max: MaxTools}
	}
	b := &budget{}
	for _, t := range tools {
		if err := b.addBytes(len(t.Parameters)); err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
	}
	b = &budget{}
	alt := reg.newNode(kAlt)
	for _, t := range tools {
		var args *node
		if t.Parameters == nil {
			args = reg.newNode(kObject) // closed, no properties: {}
		} else {
			var err error
			if args, err = compileSchemaNode(ctx, reg, t.Parameters, b); err != nil {
				return nil, fmt.Errorf("tool %q: %w", t.Name, err)
			}
		}
		name := reg.newNode(kLiteral)
		name.lits = []string{quote(t.Name)}
		call := reg.newNode(kObject)
		call.props = []prop{
			{name: "name", key: `"name"`, value: name, required: true},
			{name: "arguments", key: `"arguments"`, value: args, required: true},
		}
		alt.alts = append(alt.alts, call)
	}
	flat, err := flatten(alt, map[*node]bool{})
	if err != nil {
		return nil, err
	}
	alt.alts = flat
	seq := reg.newNode(kSeq)
	seq.parts = []part{{lit: syntax.Open}, {value: alt}, {lit: syntax.Close}}
	if err := checkWidth(seq); err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	return seq, nil
}

// AnyArguments is the schema of a tool whose own schema the subset cannot express: any JSON object.
var AnyArguments = []byte(`{"type":"object"}`)

// AfterReasoning returns g preceded by a reasoning block: free text up to and including closeTag, then
// optional whitespace. inside says the prompt already opened the block; otherwise the text may start with
// openTag (and then must close it) or go straight to g.
func (g *Grammar) AfterReasoning(openTag, closeTag string, inside bool) *Grammar {
	reg := g.reg
	reasoned := reg.newNode(kSeq)
	reasoned.parts = []part{{until: closeTag}, {}, {value: g.root}}
	if !inside {
		reasoned.parts = slices.Insert(reasoned.parts, 0, part{lit: openTag})
		alt := reg.newNode(kAlt)
		alts := []*node{reasoned}
		if g.root.kind == kAlt {
			alts = append(alts, g.root.alts...)
		} else {
			alts = append(alts, g.root)
		}
		alt.alts = alts
		return newGrammar(reg, alt)
	}
	return newGrammar(reg, reasoned)
}
