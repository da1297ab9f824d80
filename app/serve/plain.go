package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/higgs-go/higgs/ports"
)

// plainRoles are the roles whose content a client writes: it is text, never control tokens. Assistant
// messages are left alone: templates read their content (Qwen3 splits it at </think>), and a client that
// forges an assistant turn forges nothing it could not write as one.
var plainRoles = map[string]bool{"user": true, "system": true, "tool": true}

// plainSpans finds where the content of user, system and tool messages that spells special tokens lies in
// the rendered prompt text, so that it is encoded as text. Messages without special-token text need no
// span (their encoding is the same either way), so the common prompt is rendered once. For the others the
// template is rendered again with each such content replaced by a unique marker; the markers' positions are
// the spans, checked by rebuilding the prompt from them: a template that transforms or inspects the content
// (so that the spans cannot be known) gets the request refused rather than encoded unsafely.
func (s *Serve) plainSpans(l *loaded, msgs []ports.ChatMessage, opts ports.ChatOptions, text string) ([]ports.Span, error) {
	pe, ok := l.Tokenizer.(ports.PlainEncoder)
	if !ok {
		return nil, nil
	}
	var marked []ports.ChatMessage
	markers := map[int]string{}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	for i, m := range msgs {
		if !plainRoles[m.Role] {
			continue
		}
		tok := pe.SpecialIn(m.Content)
		if tok == "" {
			continue
		}
		if marked == nil {
			marked = append([]ports.ChatMessage(nil), msgs...)
		}
		marker := fmt.Sprintf("HIGGSPLAIN%s%dEND", hex.EncodeToString(nonce), i)
		raw, err := withContent(m.Raw, marker)
		if err != nil {
			return nil, invalid("messages", "messages[%d]: %v", i, err)
		}
		marked[i] = ports.ChatMessage{Role: m.Role, Content: marker, Raw: raw}
		markers[i] = marker
	}
	if marked == nil {
		return nil, nil
	}
	refuse := func(i int) error {
		return invalid("messages", "messages[%d].content spells the special token %q, and this model's chat template transforms message content, so it cannot be kept as plain text; remove it (or start higgsd with --special-tokens-in-content)",
			i, pe.SpecialIn(msgs[i].Content))
	}
	tmpl, err := l.Template.Render(marked, opts)
	if err != nil {
		return nil, invalid("messages", "chat template: %v", err)
	}
	// Walk the marked prompt in order, replacing each marker by its content and recording where it lands.
	type hit struct{ at, msg int }
	var hits []hit
	for i := range msgs {
		mk, ok := markers[i]
		if !ok {
			continue
		}
		if strings.Count(tmpl, mk) != 1 {
			return nil, refuse(i)
		}
		hits = append(hits, hit{strings.Index(tmpl, mk), i})
	}
	sortHits := func(a, b hit) int { return a.at - b.at }
	slices.SortFunc(hits, sortHits)
	var sb strings.Builder
	spans := make([]ports.Span, 0, len(hits))
	prev := 0
	for _, h := range hits {
		sb.WriteString(tmpl[prev:h.at])
		start := sb.Len()
		sb.WriteString(msgs[h.msg].Content)
		spans = append(spans, ports.Span{Start: start, End: sb.Len()})
		prev = h.at + len(markers[h.msg])
	}
	sb.WriteString(tmpl[prev:])
	if sb.String() != text {
		return nil, refuse(hits[0].msg)
	}
	return spans, nil
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

// withContent returns the JSON object raw with its "content" set to the string s, other keys kept in
// their order (templates may print messages with tojson). A nil raw stays nil: the template then reads the
// message's Content.
func withContent(raw []byte, s string) ([]byte, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	val, _ := json.Marshal(s)
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("the message is not a JSON object")
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	found := false
	for n := 0; dec.More(); n++ {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		if k == "content" {
			buf.Write(val)
			found = true
		} else {
			buf.Write(v)
		}
	}
	if !found {
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		buf.WriteString(`"content":`)
		buf.Write(val)
	}
	buf.WriteByte('}')
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
