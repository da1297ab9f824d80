// Package toolcall finds function calls in generated text written in the Hermes format that Qwen3's chat
// template teaches the model (and that vLLM's "hermes" parser and llama.cpp read):
//
//	<tool_call>
//	{"name": "get_weather", "arguments": {"location": "Paris"}}
//	</tool_call>
//
// or in the XML body Qwen3.5 and Qwen3-Coder write inside the same tags (vLLM's "qwen3_coder"; see xml.go):
//
//	<tool_call>
//	<function=get_weather>
//	<parameter=location>
//	Paris
//	</parameter>
//	</function>
//	</tool_call>
//
// A Parser is fed the answer text (reasoning already split off) piece by piece, as it is streamed, and
// returns the text that is final content and the calls that are complete. Parse is the same over a whole
// text; for any way of cutting a text into pieces the Parser returns exactly what Parse returns.
//
// Rules (vLLM's where it has one):
//   - A block whose body is neither a JSON object with a non-empty string "name" and an "arguments" object
//     (or a string holding one, or nothing) nor a well-formed XML function is not a call: it stays in the
//     content as written, tags included.
//   - A block still open when the text ends is a call when its body is complete (a stop token may end the
//     answer before "</tool_call>"); otherwise it is a call cut short (max_tokens) and is dropped, as is an
//     opening tag the text ends inside ("<tool_"; a lone "<" only when it is all the content): no partial
//     tag ever reaches the content.
//   - Whitespace that only separates a block from its neighbours (the newline before "<tool_call>", the
//     newlines between blocks and after the last one) is not content. Text without calls is never changed.
//   - Arguments are returned as the JSON text the model wrote (OpenAI sends them as a string of JSON). Keeping
//     the model's spelling means a client that sends the call back in the history re-renders exactly what
//     the model generated, in the spacing Qwen's template itself uses ({"a": 1}).
//
// The package is pure: it never fails and never panics, whatever the text.
package toolcall

import (
	"bytes"
	"encoding/json"
	"strings"
)

// The tags Qwen3 uses; both are single (non-special) tokens in its vocabulary, so they reach the text.
const (
	Open  = "<tool_call>"
	Close = "</tool_call>"
)

// Call is one function call the model made.
type Call struct {
	Name string
	// Arguments is the arguments object as the JSON text the model wrote, "{}" when it gave none.
	Arguments string
}

// Parse splits a whole answer into its content and its calls; types (may be nil) read XML-format values.
func Parse(text string, types ParamTypes) (content string, calls []Call) {
	p := Parser{Types: types}
	c1, k1 := p.Feed(text)
	c2, k2 := p.Flush()
	return c1 + c2, append(k1, k2...)
}

// Parser is the streaming form of Parse. The zero value is ready to use; it is not safe for concurrent use.
type Parser struct {
	// Types reads XML-format parameter values by the tools' schemas (nil: every value is a string).
	Types ParamTypes

	pending  string // text not yet released: a possible partial tag, held whitespace, or an open block's body
	inBlock  bool   // pending is the body of an open block (after Open)
	searched int    // while inBlock: pending[:searched] holds no Close that could still complete (scan resumes there)
	gap      string // the whitespace before the open block: content again if the block is no call
	afterTag bool   // the last thing released or consumed was a call (held whitespace then belongs to it)
	emitted  bool   // some content has been released
	called   bool   // some call has been returned
}

// Called reports whether any call has been returned so far.
func (p *Parser) Called() bool { return p.called }

// Part is one piece of an answer in the order the model wrote it: content (Call nil) or a call.
type Part struct {
	Content string
	Call    *Call
}

// ParseParts is Parse keeping the order of content and calls (adjacent content in one part).
func ParseParts(text string, types ParamTypes) []Part {
	p := Parser{Types: types}
	return mergeParts(p.FeedParts(text), p.FlushParts())
}

// Feed adds s and returns the content that is now final and the calls that are now complete.
func (p *Parser) Feed(s string) (content string, calls []Call) {
	return join(p.FeedParts(s))
}

// Flush ends the text: everything held back is settled. The Parser is then empty again, but remembers
// whether it returned calls.
func (p *Parser) Flush() (content string, calls []Call) {
	return join(p.FlushParts())
}

// FeedParts is Feed keeping the order of content and calls.
func (p *Parser) FeedParts(s string) []Part {
	p.pending += s
	return p.scan(false)
}

// FlushParts is Flush keeping the order of content and calls.
func (p *Parser) FlushParts() []Part { return p.scan(true) }

func join(parts []Part) (string, []Call) {
	var sb strings.Builder
	var calls []Call
	for _, pt := range parts {
		if pt.Call != nil {
			calls = append(calls, *pt.Call)
		} else {
			sb.WriteString(pt.Content)
		}
	}
	return sb.String(), calls
}

// mergeParts appends b to a, joining content that meets across the seam.
func mergeParts(a, b []Part) []Part {
	for _, pt := range b {
		if n := len(a); pt.Call == nil && n > 0 && a[n-1].Call == nil {
			a[n-1].Content += pt.Content
			continue
		}
		a = append(a, pt)
	}
	return a
}

func (p *Parser) scan(final bool) []Part {
	var out strings.Builder
	var parts []Part
	// done returns the parts with the content written since the last call.
	done := func() []Part {
		if out.Len() > 0 {
			parts = append(parts, Part{Content: out.String()})
			out.Reset()
		}
		return parts
	}
	for {
		if p.inBlock {
			// Resume the search where the last one stopped (less a partial Close), so a long block costs linear
			// time over its pieces rather than quadratic.
			from := max(0, p.searched-len(Close)+1)
			i := strings.Index(p.pending[from:], Close)
			if i >= 0 {
				i += from
			}
			if i < 0 && !final {
				p.searched = len(p.pending)
				return done() // the block is still being written
			}
			p.searched = 0
			body, rest, closed := p.pending, "", false
			if i >= 0 {
				body, rest, closed = p.pending[:i], p.pending[i+len(Close):], true
			}
			gap := p.gap
			p.inBlock, p.gap = false, ""
			if c, ok := parseBody(body, p.Types); ok {
				parts = append(done(), Part{Call: &c})
				p.called, p.afterTag = true, true
			} else if closed {
				// Not a call: the block is content as written. (Text that ended inside the block — max_tokens
				// cut a call short — is dropped: a partial call is not content.)
				out.WriteString(p.release(gap + Open + body))
				out.WriteString(Close)
			}
			p.pending = rest
			continue
		}
		i := strings.Index(p.pending, Open)
		if i >= 0 {
			// Whitespace right before a block only separates it from what comes before.
			text := strings.TrimRight(p.pending[:i], whitespace)
			out.WriteString(p.release(text))
			p.gap = p.pending[len(text):i]
			p.pending = p.pending[i+len(Open):]
			p.inBlock = true
			continue
		}
		if final {
			text := p.pending
			if n := holdBack(text, Open); n >= minPartialTag || n > 0 && !p.emitted && strings.TrimLeft(text[:len(text)-n], whitespace) == "" {
				// The text ended inside an opening tag: the start of a call cut short is not content, nor is the
				// whitespace before it.
				text = strings.TrimRight(text[:len(text)-n], whitespace)
			}
			if p.afterTag && strings.TrimLeft(text, whitespace) == "" {
				// Whitespace after the last block is not content.
				text = ""
			}
			out.WriteString(p.release(text))
			p.pending = ""
			return done()
		}
		// Hold back a possible start of Open and the trailing whitespace (it may precede a block).
		keep := len(p.pending) - holdBack(p.pending, Open)
		keep = len(strings.TrimRight(p.pending[:keep], whitespace))
		out.WriteString(p.release(p.pending[:keep]))
		p.pending = p.pending[keep:]
		return done()
	}
}

const whitespace = " \t\r\n"

// minPartialTag is the shortest start of Open that ending the text drops ("<t"; a lone "<" stays content
// unless it is all the content, as when max_tokens cuts a forced call after its first token).
const minPartialTag = 2

// release returns text as content; whitespace that follows a call and starts the content is dropped.
func (p *Parser) release(text string) string {
	if p.afterTag && !p.emitted {
		text = strings.TrimLeft(text, whitespace)
	}
	if text == "" {
		return ""
	}
	p.emitted, p.afterTag = true, false
	return text
}

// holdBack returns the length of the longest suffix of s that is a proper prefix of tag.
func holdBack(s, tag string) int {
	for n := min(len(tag)-1, len(s)); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}

// parseBody reads a block's body: {"name": string, "arguments": object | string holding an object | absent},
// or an XML function.
func parseBody(body string, types ParamTypes) (Call, bool) {
	if strings.HasPrefix(strings.TrimSpace(body), funcOpen) {
		return parseXMLBody(body, types)
	}
	var v struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		// Parameters is the name some models (Llama-style, fine-tunes) use for the arguments; without this
		// alias their calls would run with no arguments at all.
		Parameters json.RawMessage `json:"parameters"`
	}
	raw := []byte(strings.TrimSpace(body))
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &v) != nil || v.Name == nil || *v.Name == "" {
		return Call{}, false
	}
	args := bytes.TrimSpace(v.Arguments)
	if len(args) == 0 {
		args = bytes.TrimSpace(v.Parameters)
	}
	if len(args) > 0 && args[0] == '"' {
		// Some models write the arguments as a string of JSON, as OpenAI sends them back.
		var s string
		if json.Unmarshal(args, &s) != nil {
			return Call{}, false
		}
		args = bytes.TrimSpace([]byte(s))
	}
	switch {
	case len(args) == 0 || bytes.Equal(args, []byte("null")):
		return Call{Name: *v.Name, Arguments: "{}"}, true
	case args[0] != '{' || !json.Valid(args):
		return Call{}, false
	}
	return Call{Name: *v.Name, Arguments: string(args)}, true
}
