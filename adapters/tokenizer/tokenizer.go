package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.Tokenizer = (*Tokenizer)(nil)

// Tokenizer is a loaded tokenizer.json. It is immutable after loading and safe for concurrent use.
type Tokenizer struct {
	norm  *normalizer
	pre   *preTokenizer
	model *bpe
	post  *postProcessor

	// rawAdded matches added tokens with normalized=false against the raw text; normAdded matches the others
	// against normalized text.
	rawAdded, normAdded *addedMatcher
	// rawPlain and normPlain are the same matchers without the special tokens: what plain text is split by.
	rawPlain, normPlain *addedMatcher

	tokens  []string // id → token string (added tokens' content for added ids); "" for holes
	valid   []bool   // id is assigned
	special []bool   // id is a special added token (skipped by Decode(skipSpecial=true))
	pieces  [][]byte // id → the bytes the decoder turns it into
	lookup  map[string]int32

	eos, bos, pad string // token strings from tokenizer_config.json ("" when not set)
}

// Load reads dir/tokenizer.json (or dir/tokenizer.json.gz) and, when present, dir/tokenizer_config.json.
func Load(dir string) (*Tokenizer, error) {
	data, err := readMaybeGzip(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}
	t, err := Parse(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer from %s: %w", dir, err)
	}
	return t, nil
}

// readMaybeGzip reads path, or path+".gz" decompressed when path does not exist.
func readMaybeGzip(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return data, err
	}
	f, gzErr := os.Open(path + ".gz")
	if gzErr != nil {
		return nil, err // report the plain file as missing
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s.gz: %w", path, err)
	}
	data, err = io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s.gz: %w", path, err)
	}
	return data, nil
}

// Parse builds a Tokenizer from the contents of tokenizer.json and, optionally (nil), tokenizer_config.json.
func Parse(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	var f fileJSON
	dec := json.NewDecoder(bytes.NewReader(tokenizerJSON))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if f.Model == nil {
		return nil, errors.New(`tokenizer.json has no "model"`)
	}
	if !isNull(f.Truncation) {
		return nil, fmt.Errorf("truncation settings: %w (remove them from tokenizer.json)", ErrUnsupported)
	}
	if err := checkPadding(f.Padding); err != nil {
		return nil, err
	}
	t := &Tokenizer{}
	var err error
	if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.post, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if t.model, err = newBPE(f.Model, t.pre.byteLevel); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := t.buildVocab(f.Model.Vocab, f.AddedTokens); err != nil {
		return nil, err
	}
	if len(configJSON) > 0 {
		if err := t.readConfig(configJSON); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func checkPadding(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var p struct {
		Strategy json.RawMessage `json:"strategy"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("padding: %w", err)
	}
	// BatchLongest pads batches only; a single encode is unaffected.
	if string(p.Strategy) == `"BatchLongest"` {
		return nil
	}
	return fmt.Errorf("padding strategy %s: %w", p.Strategy, ErrUnsupported)
}

func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("decoder: none: %w (only ByteLevel)", ErrUnsupported)
	}
	kind, err := componentType(raw)
	if err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	if kind != "ByteLevel" {
		return fmt.Errorf("decoder: type %q: %w (only ByteLevel)", kind, ErrUnsupported)
	}
	return nil
}

func (t *Tokenizer) buildVocab(vocab map[string]int32, added []addedTokenJSON) error {
	size := int32(0)
	for _, id := range vocab {
		size = max(size, id+1)
	}
	tokens := make([]*addedToken, 0, len(added))
	for i, a := range added {
		if a.ID == nil || *a.ID < 0 {
			return fmt.Errorf("added_tokens[%d] %q has no valid id", i, a.Content)
		}
		if a.Content == "" {
			return fmt.Errorf("added_tokens[%d] has empty content", i)
		}
		tokens = append(tokens, &addedToken{id: *a.ID, content: a.Content, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: a.Normalized, special: a.Special})
		size = max(size, *a.ID+1)
	}
	t.tokens = make([]string, size)
	t.valid = make([]bool, size)
	t.special = make([]bool, size)
	t.pieces = make([][]byte, size)
	t.lookup = make(map[string]int32, len(vocab)+len(tokens))
	for tok, id := range vocab {
		t.tokens[id], t.valid[id] = tok, true
		t.lookup[tok] = id
	}
	var raw, normed, rawPlain, normPlain []*addedToken
	for _, a := range tokens {
		t.tokens[a.id], t.valid[a.id], t.special[a.id] = a.content, true, a.special
		t.lookup[a.content] = a.id
		if a.normalized {
			normed = append(normed, a)
		} else {
			raw = append(raw, a)
		}
		if a.special {
			continue
		}
		if a.normalized {
			normPlain = append(normPlain, a)
		} else {
			rawPlain = append(rawPlain, a)
		}
	}
	for id, tok := range t.tokens {
		if t.valid[id] {
			t.pieces[id] = byteLevelTokenBytes(tok)
		}
	}
	t.rawAdded = newAddedMatcher(raw, func(a *addedToken) string { return a.content })
	t.normAdded = newAddedMatcher(normed, func(a *addedToken) string { return t.norm.apply(a.content) })
	t.rawPlain = newAddedMatcher(rawPlain, func(a *addedToken) string { return a.content })
	t.normPlain = newAddedMatcher(normPlain, func(a *addedToken) string { return t.norm.apply(a.content) })
	return nil
}

// readConfig takes the bos/eos/pad token strings from tokenizer_config.json (string or {"content": ...}).
func (t *Tokenizer) readConfig(data []byte) error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("parse tokenizer_config.json: %w", err)
	}
	for key, dst := range map[string]*string{"eos_token": &t.eos, "bos_token": &t.bos, "pad_token": &t.pad} {
		s, err := SpecialTokenString(cfg[key])
		if err != nil {
			return fmt.Errorf("tokenizer_config.json %s: %w", key, err)
		}
		*dst = s
	}
	return nil
}

// SpecialTokenString reads a tokenizer_config.json special-token field: null, a string, or an AddedToken
// object with "content".
func SpecialTokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("neither a string nor an object with content: %w", err)
	}
	return obj.Content, nil
}

// Encode tokenizes text like Hugging Face's Tokenizer.encode(text) with add_special_tokens=true.
func (t *Tokenizer) Encode(text string) ([]ports.Token, error) {
	return t.EncodeWith(text, true), nil
}

// EncodeWith tokenizes text; addSpecialTokens applies the post-processor's template (for example a BOS
// token). Added tokens written in the text are always recognised. Rendered chat templates are encoded with
// addSpecialTokens=false, as transformers' apply_chat_template does.
func (t *Tokenizer) EncodeWith(text string, addSpecialTokens bool) []ports.Token {
	text = sanitizeUTF8(text)
	ids := make([]int32, 0, len(text)/3+1)
	emitWord := func(w string) { ids = t.model.tokenize(w, ids) }
	t.rawAdded.split(text, func(piece string, tok *addedToken) {
		if tok != nil {
			ids = append(ids, tok.id)
			return
		}
		if piece == "" {
			return
		}
		t.normAdded.split(t.norm.apply(piece), func(p string, tok *addedToken) {
			if tok != nil {
				ids = append(ids, tok.id)
				return
			}
			t.pre.run(p, emitWord)
		})
	})
	if addSpecialTokens {
		ids = t.post.apply(ids)
	}
	return ids
}

// Decode turns ids back into text the way Hugging Face's ByteLevel decoder does; skipSpecial drops special
// added tokens. Ids outside the vocabulary are an error.
func (t *Tokenizer) Decode(ids []ports.Token, skipSpecial bool) (string, error) {
	var buf []byte
	for _, id := range ids {
		p, keep, err := t.piece(id, skipSpecial)
		if err != nil {
			return "", err
		}
		if keep {
			buf = append(buf, p...)
		}
	}
	var sb strings.Builder
	sb.Grow(len(buf))
	appendLossy(&sb, buf, false)
	return sb.String(), nil
}

// ErrUnknownID is wrapped when an id is outside the vocabulary.
var ErrUnknownID = errors.New("token id outside the vocabulary")

func (t *Tokenizer) piece(id ports.Token, skipSpecial bool) ([]byte, bool, error) {
	if id < 0 || int(id) >= len(t.tokens) || !t.valid[id] {
		return nil, false, fmt.Errorf("decode id %d: %w (size %d)", id, ErrUnknownID, len(t.tokens))
	}
	if skipSpecial && t.special[id] {
		return nil, false, nil
	}
	return t.pieces[id], true, nil
}

// TokenID returns the id of a token's exact string form (added tokens first, then the vocabulary's
// byte-level strings, so "Ġthe" rather than " the").
func (t *Tokenizer) TokenID(token string) (ports.Token, bool) {
	id, ok := t.lookup[token]
	return id, ok
}

// Token returns the string form of id ("" and false when it is not assigned).
func (t *Tokenizer) Token(id ports.Token) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || !t.valid[id] {
		return "", false
	}
	return t.tokens[id], true
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id ports.Token) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// VocabSize returns the number of ids: base vocabulary plus added tokens (the largest id + 1).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// EOS returns tokenizer_config.json's eos_token and its id, when both exist.
func (t *Tokenizer) EOS() (string, ports.Token, bool) { return t.named(t.eos) }

// BOS returns tokenizer_config.json's bos_token and its id, when both exist.
func (t *Tokenizer) BOS() (string, ports.Token, bool) { return t.named(t.bos) }

// Pad returns tokenizer_config.json's pad_token and its id, when both exist.
func (t *Tokenizer) Pad() (string, ports.Token, bool) { return t.named(t.pad) }

func (t *Tokenizer) named(s string) (string, ports.Token, bool) {
	if s == "" {
		return "", ports.NoToken, false
	}
	id, ok := t.lookup[s]
	if !ok {
		return s, ports.NoToken, false
	}
	return s, id, true
}
