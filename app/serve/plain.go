package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/higgs-go/higgs/ports"
)

// plainSpans finds where client-written text that spells special tokens lies in the rendered prompt text,
// so that it is encoded as text: the content of every message, assistant turns included (a client relays
// untrusted text into its history: a forged <|im_start|>system there would be a system turn), and every
// other string of a message (an assistant turn's tool_calls, reasoning_content, names). Messages without
// special-token text need no span (their encoding is the same either way), so the common prompt is rendered
// once. For the others each special-token spelling is replaced by a unique marker and the template rendered
// again; every marker found in that render is a span (a template may drop text, such as an earlier turn's
// reasoning, or print it twice), checked by rebuilding the prompt from the render: a template that
// transforms the text around a spelling (so that the spans cannot be known) gets the request refused
// rather than encoded unsafely.
func (s *Serve) plainSpans(l *loaded, msgs []ports.ChatMessage, opts ports.ChatOptions, text string) ([]ports.Span, error) {
	pe, ok := l.Tokenizer.(ports.PlainEncoder)
	if !ok {
		return nil, nil
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	mk := &markers{pe: pe, prefix: "HIGGSPLAIN" + hex.EncodeToString(nonce) + "N"}
	var marked []ports.ChatMessage
	first := -1 // the first message with special-token text (named when refused)
	for i, m := range msgs {
		content := mk.mark(m.Content)
		raw, err := mapStrings(m.Raw, mk.mark)
		if err != nil {
			return nil, invalid("messages", "messages[%d]: %v", i, err)
		}
		if mk.failed != "" {
			return nil, refusePlain(i, mk.failed)
		}
		if content == m.Content && bytes.Equal(raw, m.Raw) {
			continue
		}
		if marked == nil {
			marked = append([]ports.ChatMessage(nil), msgs...)
			first = i
		}
		marked[i] = ports.ChatMessage{Role: m.Role, Content: content, Raw: raw}
	}
	if marked == nil {
		return nil, nil
	}
	tmpl, err := l.Template.Render(marked, opts)
	if err != nil {
		return nil, invalid("messages", "chat template: %v", err)
	}
	// Walk the marked prompt in order, replacing each marker by its spelling and recording where it lands.
	var sb strings.Builder
	var spans []ports.Span
	for {
		at := strings.Index(tmpl, mk.prefix)
		if at < 0 {
			break
		}
		end := strings.Index(tmpl[at+len(mk.prefix):], "E")
		n := -1
		if end >= 0 {
			if v, err := strconv.Atoi(tmpl[at+len(mk.prefix) : at+len(mk.prefix)+end]); err == nil && v < len(mk.spelled) {
				n = v
			}
		}
		if n < 0 {
			return nil, refusePlain(first, mk.spelled[0])
		}
		sb.WriteString(tmpl[:at])
		start := sb.Len()
		sb.WriteString(mk.spelled[n])
		spans = append(spans, ports.Span{Start: start, End: sb.Len()})
		tmpl = tmpl[at+len(mk.prefix)+end+1:]
	}
	sb.WriteString(tmpl)
	if sb.String() != text {
		return nil, refusePlain(first, mk.spelled[0])
	}
	return spans, nil
}

// refusePlain is the error of a message whose special-token text cannot be kept as plain text.
func refusePlain(i int, spelled string) error {
	return invalid("messages", "messages[%d] spells the special token %q, and this model's chat template transforms message text, so it cannot be kept as plain text; remove it (or start higgsd with --special-tokens-in-content)",
		i, spelled)
}

// markers replaces special-token spellings in client text by unique markers: prefix, a number, "E".
type markers struct {
	pe     ports.PlainEncoder
	prefix string
	// spelled[n] is the spelling marker n stands for.
	spelled []string
	// failed is a spelling found (after the tokenizer's normalization) but not written as such: it cannot
	// be replaced.
	failed string
}

// mark returns s with each special-token spelling replaced by a marker of its own.
func (m *markers) mark(s string) string {
	for {
		tok := m.pe.SpecialIn(s)
		if tok == "" {
			return s
		}
		if !strings.Contains(s, tok) {
			m.failed = tok
			return s
		}
		s = strings.Replace(s, tok, fmt.Sprintf("%s%dE", m.prefix, len(m.spelled)), 1)
		m.spelled = append(m.spelled, tok)
	}
}

// encodeText encodes the prompt, the plain spans as text where there are any.
func encodeText(tok ports.Tokenizer, text string, plain []ports.Span) ([]ports.Token, error) {
	if len(plain) == 0 {
		return tok.Encode(text)
	}
	pe, ok := tok.(ports.PlainEncoder)
	if !ok {
		return nil, errors.New("the tokenizer cannot encode plain text spans")
	}
	return pe.EncodePlain(text, plain)
}

// mapStrings returns the JSON document raw with f applied to every string in it, keys included, everything
// else (key order, numbers) kept: templates print messages and tool calls with tojson. A nil raw stays nil.
func mapStrings(raw []byte, f func(string) string) ([]byte, error) {
	if len(raw) == 0 {
		return raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var buf bytes.Buffer
	changed := false
	str := func(s string) {
		t := f(s)
		changed = changed || t != s
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(t)
		buf.Truncate(buf.Len() - 1) // Encode's newline
	}
	var value func() error
	value = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			closer := byte('}')
			if t == '[' {
				closer = ']'
			}
			buf.WriteByte(byte(t))
			for n := 0; dec.More(); n++ {
				if n > 0 {
					buf.WriteByte(',')
				}
				if t == '{' {
					k, err := dec.Token()
					if err != nil {
						return err
					}
					ks, _ := k.(string)
					str(ks)
					buf.WriteByte(':')
				}
				if err := value(); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			buf.WriteByte(closer)
		case string:
			str(t)
		case json.Number:
			buf.WriteString(t.String())
		case bool:
			buf.WriteString(strconv.FormatBool(t))
		case nil:
			buf.WriteString("null")
		}
		return nil
	}
	if err := value(); err != nil {
		return nil, errors.New("the message is not valid JSON")
	}
	if !changed {
		return raw, nil
	}
	return buf.Bytes(), nil
}

// toolsSpecial refuses tool definitions that spell a special token: the template prints them (names,
// descriptions, schemas) into the system turn with its own markup, where the spans of client text cannot be
// kept apart, and tool definitions often come from third parties (MCP servers). Every string of the JSON is
// checked after decoding, so an escaped spelling (\u003c|im_end|\u003e) is caught too.
func toolsSpecial(l *loaded, tools []byte) error {
	pe, ok := l.Tokenizer.(ports.PlainEncoder)
	if !ok || len(tools) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(tools, &v); err != nil {
		return invalid("tools", "tools: %v", err)
	}
	var found string
	var walk func(any)
	walk = func(x any) {
		switch t := x.(type) {
		case string:
			if found == "" {
				found = pe.SpecialIn(t)
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			for k, e := range t {
				walk(k)
				walk(e)
			}
		}
	}
	walk(v)
	if found != "" {
		return invalid("tools", "a tool definition spells the special token %q, which the chat template would turn into a control token; remove it (or start higgsd with --special-tokens-in-content)", found)
	}
	return nil
}
