package constrained

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/ports"
)

// DefaultMatchers is how many constraints' matchers a Compiler keeps when Options.Matchers is 0.
const DefaultMatchers = 64

// DefaultCompileTimeout bounds one constraint's compile when Options.CompileTimeout is 0. The size limits
// (grammar.MaxSchemaBytes and the others) keep every compile well under it; it is the backstop that turns a
// compile the limits did not foresee into a 400 rather than minutes of a core.
const DefaultCompileTimeout = 2 * time.Second

// Options configure a Compiler.
type Options struct {
	// ThinkOpen and ThinkClose are the reasoning block's markers that a constraint may let through before
	// the constrained part ("" for both: the model does not reason in blocks).
	ThinkOpen, ThinkClose string
	// Matchers bounds the constraints whose matchers are kept (least recently used first out); 0 means
	// DefaultMatchers.
	Matchers int
	// CompileTimeout bounds one constraint's compile; 0 means DefaultCompileTimeout.
	CompileTimeout time.Duration
}

// Compiler compiles constraints for one model. It builds the model's grammar vocabulary once, on the first
// constrained request, and keeps the matchers of recent constraints: a Matcher caches masks per grammar
// state, so requests repeating a schema (an agent's tools, an application's response format) reuse the
// masks computed before. It is safe for concurrent use.
type Compiler struct {
	tok       ports.Tokenizer
	vocabSize int
	eos       []ports.Token // the end-of-sequence ids inside the vocabulary, sorted
	opts      Options

	once  sync.Once
	vocab *grammar.Vocab
	err   error

	matchers *lru.Cache[string, *grammar.Matcher]
	// valid holds the hashes of tool schemas CheckToolSchemas found valid.
	valid *lru.Cache[[sha256.Size]byte, struct{}]
}

// NewCompiler returns the compiler of a model whose logit rows have vocabSize entries, whose tokenizer is
// tok (it must implement ports.TokenBytes for any constraint to compile) and whose generations end at eos.
func NewCompiler(tok ports.Tokenizer, vocabSize int, eos []ports.Token, o Options) (*Compiler, error) {
	if o.Matchers == 0 {
		o.Matchers = DefaultMatchers
	}
	if o.Matchers < 0 {
		return nil, fmt.Errorf("constrained: matcher cache size %d must be ≥ 0", o.Matchers)
	}
	if o.CompileTimeout == 0 {
		o.CompileTimeout = DefaultCompileTimeout
	}
	if o.CompileTimeout < 0 {
		return nil, fmt.Errorf("constrained: compile timeout %v must be ≥ 0", o.CompileTimeout)
	}
	cache, err := lru.New[string, *grammar.Matcher](o.Matchers)
	if err != nil {
		return nil, fmt.Errorf("constrained: %w", err)
	}
	valid, err := lru.New[[sha256.Size]byte, struct{}](validSchemas)
	if err != nil {
		return nil, fmt.Errorf("constrained: %w", err)
	}
	c := &Compiler{tok: tok, vocabSize: vocabSize, opts: o, matchers: cache, valid: valid}
	for _, t := range eos {
		if t >= 0 && int(t) < vocabSize && !slices.Contains(c.eos, t) {
			c.eos = append(c.eos, t)
		}
	}
	slices.Sort(c.eos)
	return c, nil
}

// Matcher returns the matcher of constraint k (nil for a nil constraint). think says the output may start
// with a reasoning block, which the grammar lets through before the constrained part; inThink that the
// prompt already opened it. A constraint the grammar subset cannot express is a *ports.RequestError naming
// k.Param, whose chain keeps the cause (a *grammar.SchemaError names the keyword and where it is, a
// *grammar.LimitError the size limit passed); so is a compile that outlasts Options.CompileTimeout. The
// compile stops when ctx is done (the client left), returning ctx's error wrapped.
func (c *Compiler) Matcher(ctx context.Context, k *ports.Constraint, think, inThink bool) (*grammar.Matcher, error) {
	if k == nil {
		return nil, nil
	}
	key := constraintKey(k, think, inThink)
	if m, ok := c.matchers.Get(key); ok {
		return m, nil
	}
	cctx, cancel := context.WithTimeout(ctx, c.opts.CompileTimeout)
	defer cancel()
	g, err := c.grammar(cctx, k, think, inThink)
	stopped := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	switch {
	case stopped && ctx.Err() != nil:
		return nil, fmt.Errorf("constraint: %w", err)
	case stopped:
		return nil, invalidCause(k.Param, fmt.Errorf("compiling the constraint took longer than the limit of %v; simplify the schema: %w", c.opts.CompileTimeout, err))
	case err != nil:
		return nil, invalidCause(k.Param, err)
	}
	v, err := c.Vocab()
	if err != nil {
		return nil, invalidCause(k.Param, err)
	}
	if len(c.eos) == 0 {
		return nil, &ports.RequestError{Param: k.Param, Message: "this model has no end-of-sequence token, so a constrained answer could never end"}
	}
	m, err := grammar.NewMatcher(g, v, c.eos)
	if err != nil {
		return nil, fmt.Errorf("constraint: %w", err)
	}
	c.matchers.Add(key, m)
	return m, nil
}

// Vocab is the model's vocabulary as the grammar sees it (built once).
func (c *Compiler) Vocab() (*grammar.Vocab, error) {
	c.once.Do(func() {
		tb, ok := c.tok.(ports.TokenBytes)
		if !ok {
			c.err = fmt.Errorf("this model's tokenizer (%T) does not expose its token bytes, which constrained decoding needs", c.tok)
			return
		}
		c.vocab = BuildVocab(tb, c.vocabSize, c.eos)
	})
	return c.vocab, c.err
}

// BuildVocab is the byte strings of ids [0, size) over a model's logit rows: ids the tokenizer does not
// know, and special tokens, have none, and neither do the EOS ids even when they are ordinary tokens, so that
// the grammar never lets one be spelt inside a string (it would end the generation there).
func BuildVocab(tb ports.TokenBytes, size int, eos []ports.Token) *grammar.Vocab {
	bytes := make([][]byte, size)
	for id := range size {
		if slices.Contains(eos, ports.Token(id)) {
			continue
		}
		if b, special, ok := tb.TokenBytes(ports.Token(id)); ok && !special && len(b) > 0 {
			bytes[id] = b
		}
	}
	return grammar.NewVocab(bytes)
}

// constraintKey identifies everything a constraint's grammar is compiled from.
func constraintKey(c *ports.Constraint, think, inThink bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%t|%t|%t|%q|", c.Kind, c.Parallel, think, inThink, c.Schema)
	for _, t := range c.Tools {
		fmt.Fprintf(&b, "%q|%t|%q|", t.Name, t.Strict, t.Parameters)
	}
	return b.String()
}

// grammar compiles a constraint; with think the grammar lets a reasoning block through first.
func (c *Compiler) grammar(ctx context.Context, k *ports.Constraint, think, inThink bool) (*grammar.Grammar, error) {
	var g *grammar.Grammar
	var err error
	switch k.Kind {
	case ports.ConstrainJSONObject:
		g = grammar.JSONObject()
	case ports.ConstrainJSONSchema:
		g, err = grammar.CompileSchema(ctx, k.Schema)
	case ports.ConstrainToolCall, ports.ConstrainStrictTools:
		var tools []grammar.Tool
		if tools, err = c.grammarTools(ctx, k.Tools); err != nil {
			break
		}
		if k.Kind == ports.ConstrainStrictTools {
			// Free text holds the reasoning too: no reasoning prefix is needed.
			return grammar.StrictTools(ctx, tools, grammar.Hermes)
		}
		g, err = grammar.ToolCalls(ctx, tools, grammar.Hermes, k.Parallel)
	default:
		return nil, fmt.Errorf("unknown constraint kind %d", k.Kind)
	}
	if err != nil {
		return nil, err
	}
	if think && c.opts.ThinkOpen != "" {
		g = g.AfterReasoning(c.opts.ThinkOpen, c.opts.ThinkClose, inThink)
	}
	return g, nil
}

// grammarTools keeps each tool's schema where the subset can express it. Every tool's schema must be a JSON
// Schema within the size limits, strict or not (as OpenAI and Anthropic check); a strict tool's schema the
// subset cannot express is an error too, a lenient one's arguments are then held to be a JSON object only.
func (c *Compiler) grammarTools(ctx context.Context, in []ports.ConstraintTool) ([]grammar.Tool, error) {
	if len(in) > grammar.MaxTools {
		return nil, &grammar.LimitError{What: "tools", N: len(in), Max: grammar.MaxTools}
	}
	out := make([]grammar.Tool, 0, len(in))
	for _, t := range in {
		gt := grammar.Tool{Name: t.Name, Parameters: t.Parameters}
		if t.Parameters != nil && !t.Strict {
			if err := c.validSchema(t.Parameters); err != nil {
				return nil, fmt.Errorf("tool %q: %w", t.Name, err)
			}
			var se *grammar.SchemaError
			if _, err := grammar.CompileSchema(ctx, t.Parameters); errors.As(err, &se) {
				gt.Parameters = grammar.AnyArguments
			} else if err != nil {
				return nil, fmt.Errorf("tool %q: %w", t.Name, err)
			}
		}
		out = append(out, gt)
	}
	return out, nil
}

// CheckToolSchemas checks the parameters of every tool of tools, an array in the shape chat templates print
// ([{"type": "function", "function": {"name", "parameters"}}]): each must be a JSON Schema within the size
// limits, whether or not a constraint will compile it (OpenAI and Anthropic refuse an invalid schema of any
// tool). The error names the tool. Schemas found valid are remembered (an agent sends its tools with every
// request), so a repeated tool set costs a hash per tool.
func (c *Compiler) CheckToolSchemas(tools []byte) error {
	if len(tools) == 0 {
		return nil
	}
	var defs []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(tools, &defs); err != nil {
		return fmt.Errorf("tools: %w", err)
	}
	for _, d := range defs {
		p := bytes.TrimSpace(d.Function.Parameters)
		if len(p) == 0 || bytes.Equal(p, []byte("null")) {
			continue
		}
		if err := c.validSchema(p); err != nil {
			return fmt.Errorf("tool %q: parameters: %w", d.Function.Name, err)
		}
	}
	return nil
}

// validSchemas is how many valid tool schemas a Compiler remembers.
const validSchemas = 1024

// requestCause is a request error that keeps its cause in the chain: errors.As finds the
// *ports.RequestError (the adapters' 400 and its parameter) and the cause alike (a *grammar.SchemaError).
type requestCause struct {
	req   *ports.RequestError
	cause error
}

func (e *requestCause) Error() string   { return e.req.Error() }
func (e *requestCause) Unwrap() []error { return []error{e.req, e.cause} }

// invalidCause is the request error for param whose message is err's.
func invalidCause(param string, err error) error {
	return &requestCause{req: &ports.RequestError{Param: param, Message: err.Error()}, cause: err}
}

// limitError turns a grammar's stack limit into a request error (the schema, not the server, is at fault:
// a 400 when no part of the answer was sent yet); other errors pass unchanged.
func limitError(err error) error {
	if errors.Is(err, grammar.ErrTooManyStacks) {
		return invalidCause("", err)
	}
	return err
}

// validSchema checks one tool's parameters against the JSON Schema limits and meta-schema, remembering the
// schemas found valid: CheckToolSchemas (every request with tools) and the constraint's compile (a matcher
// cache miss) ask about the same schemas, and the meta-schema check is the costly part.
func (c *Compiler) validSchema(p []byte) error {
	sum := sha256.Sum256(bytes.TrimSpace(p))
	if c.valid.Contains(sum) {
		return nil
	}
	if err := grammar.ValidateSchema(p); err != nil {
		return err
	}
	c.valid.Add(sum, struct{}{})
	return nil
}
