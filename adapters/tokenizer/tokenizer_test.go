package tokenizer_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"

	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/internal/testmodel"
)

func TestQwen3Basics(t *testing.T) {
	tok := tokenizers(t)["qwen3"]
	assert.Equal(t, 151669, tok.VocabSize())
	id, ok := tok.TokenID("<|im_end|>")
	assert.True(t, ok)
	assert.EqualValues(t, 151645, id)
	id, ok = tok.TokenID("Ġthe")
	assert.True(t, ok)
	s, ok := tok.Token(id)
	assert.True(t, ok)
	assert.Equal(t, "Ġthe", s)
	_, ok = tok.TokenID(" the")
	assert.False(t, ok, "TokenID takes the vocabulary's byte-level form")
	assert.True(t, tok.IsSpecial(151645))
	assert.False(t, tok.IsSpecial(151667), "<think> is added but not special in Qwen3")
	eos, eosID, ok := tok.EOS()
	assert.True(t, ok)
	assert.Equal(t, "<|im_end|>", eos)
	assert.EqualValues(t, 151645, eosID)
	_, _, ok = tok.BOS()
	assert.False(t, ok, "Qwen3 has no BOS")

	ids, err := tok.Encode("Hello, my dog is cute")
	require.NoError(t, err)
	assert.Equal(t, []int32{9707, 11, 847, 5562, 374, 18838}, ids)
}

func TestHandmadeAddsBOSOnlyWithSpecialTokens(t *testing.T) {
	tok := tokenizers(t)["handmade"]
	bos, ok := tok.TokenID("<s>")
	require.True(t, ok)
	with, err := tok.Encode("the fox")
	require.NoError(t, err)
	without := tok.EncodeWith("the fox", false)
	require.NotEmpty(t, without)
	assert.Equal(t, append([]int32{bos}, without...), with)
}

// Invalid UTF-8 is replaced, maximal ill-formed subsequence by subsequence, with U+FFFD before encoding —
// what Python's bytes.decode("utf-8", "replace") would hand to Hugging Face.
func TestEncodeInvalidUTF8(t *testing.T) {
	tok := tokenizers(t)["qwen3"]
	cases := []struct{ in, same string }{
		{"a\xffb", "a\ufffdb"},
		{"\xe4\xbd好", "\ufffd好"},
		{"x\xf0\x9f\x98", "x\ufffd"},
		{"\xed\xa0\x80!", "\ufffd\ufffd\ufffd!"},
	}
	for _, c := range cases {
		got, err := tok.Encode(c.in)
		require.NoError(t, err)
		want, err := tok.Encode(c.same)
		require.NoError(t, err)
		assert.Equal(t, want, got, "%q", c.in)
	}
}

func TestDecodeErrors(t *testing.T) {
	tok := tokenizers(t)["qwen3"]
	for _, id := range []int32{-1, 151669, 1 << 30} {
		_, err := tok.Decode([]int32{1, id}, false)
		assert.ErrorIs(t, err, tokenizer.ErrUnknownID, "id %d", id)
		_, err = tok.NewStreamDecoder(false).Push(id)
		assert.ErrorIs(t, err, tokenizer.ErrUnknownID, "stream id %d", id)
	}
}

func TestStreamDecoderHoldsPartialCharacters(t *testing.T) {
	tok := tokenizers(t)["qwen3"]
	text := "A 👨‍👩‍👧‍👦 family, 你好 and é<|im_end|>"
	ids, err := tok.Encode(text)
	require.NoError(t, err)
	for _, skip := range []bool{false, true} {
		sd := tok.NewStreamDecoder(skip)
		var sb strings.Builder
		for _, id := range ids {
			piece, err := sd.Push(id)
			require.NoError(t, err)
			assert.True(t, utf8.ValidString(piece))
			assert.NotContains(t, piece, "\ufffd", "a partial character leaked out")
			sb.WriteString(piece)
		}
		sb.WriteString(sd.Flush())
		want, err := tok.Decode(ids, skip)
		require.NoError(t, err)
		assert.Equal(t, want, sb.String())
	}
	assert.Equal(t, text, mustDecode(t, tok, ids, false))
	assert.Equal(t, strings.TrimSuffix(text, "<|im_end|>"), mustDecode(t, tok, ids, true))

	// A truncated character is held until Flush, which turns it into one U+FFFD as Hugging Face does.
	var emoji []int32
	for _, c := range []string{"🫠", "𠀋", "𝔘", "🫨"} {
		ids, err := tok.Encode(c)
		require.NoError(t, err)
		if len(ids) > 1 {
			emoji = ids
			break
		}
	}
	require.NotEmpty(t, emoji, "need a character that spans several byte-level tokens")
	sd := tok.NewStreamDecoder(false)
	for _, id := range emoji[:len(emoji)-1] {
		piece, err := sd.Push(id)
		require.NoError(t, err)
		assert.Empty(t, piece)
	}
	assert.Equal(t, "\ufffd", sd.Flush())
	assert.Empty(t, sd.Flush())
}

func mustDecode(t *testing.T, tok *tokenizer.Tokenizer, ids []int32, skip bool) string {
	t.Helper()
	s, err := tok.Decode(ids, skip)
	require.NoError(t, err)
	return s
}

func TestConcurrentEncode(t *testing.T) {
	tok := tokenizers(t)["qwen3"]
	texts := []string{"concurrent encoding is safe", "并发编码", "func f() { return 1 }", "emoji 😀 here"}
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tok.EncodeWith(s, true)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for r := 0; r < 200; r++ {
				i := (g + r) % len(texts)
				assert.Equal(t, want[i], tok.EncodeWith(texts[i], true))
			}
		})
	}
	wg.Wait()
}

// handmadeJSON returns the hand-built tokenizer.json decoded as a generic map for mutation.
func handmadeJSON(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "handmade", "tokenizer.json"))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

func TestParseRefusesWhatItCannotDo(t *testing.T) {
	cases := []struct {
		name        string
		mutate      func(m map[string]any)
		unsupported bool
		msg         string
	}{
		{"wordpiece", func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" }, true, "WordPiece"},
		{"lowercase", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }, true, "Lowercase"},
		{"metaspace", func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }, true, "Metaspace"},
		{"decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }, true, "WordPiece"},
		{"no decoder", func(m map[string]any) { m["decoder"] = nil }, true, "decoder"},
		{"post", func(m map[string]any) { m["post_processor"] = map[string]any{"type": "BertProcessing"} }, true, "BertProcessing"},
		{"truncation", func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 8} }, true, "truncation"},
		{"dropout", func(m map[string]any) { m["model"].(map[string]any)["dropout"] = 0.1 }, true, "dropout"},
		{"byte fallback", func(m map[string]any) { m["model"].(map[string]any)["byte_fallback"] = true }, true, "byte_fallback"},
		{"bad regex", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(["}, "behavior": "Isolated"}
		}, false, "regex"},
		{"merge out of vocab", func(m map[string]any) {
			m["model"].(map[string]any)["merges"] = []any{[]any{"zz", "qq"}}
		}, false, "missing from the vocab"},
		{"bad merge string", func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{"a b c"} }, false, "one space"},
		{"no model", func(m map[string]any) { delete(m, "model") }, false, "model"},
		{"added without id", func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"content": "<x>"}}
		}, false, "id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := handmadeJSON(t)
			c.mutate(m)
			data, err := json.Marshal(m)
			require.NoError(t, err)
			_, err = tokenizer.Parse(data, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.msg)
			assert.Equal(t, c.unsupported, errors.Is(err, tokenizer.ErrUnsupported), "%v", err)
		})
	}
	_, err := tokenizer.Parse([]byte("{not json"), nil)
	assert.Error(t, err)
	_, err = tokenizer.Load(t.TempDir())
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestParseAcceptsStringMergesAndPlainFile(t *testing.T) {
	// The same merges in the older "a b" string form give the same tokenizer.
	m := handmadeJSON(t)
	model := m["model"].(map[string]any)
	var strs []any
	for _, p := range model["merges"].([]any) {
		pair := p.([]any)
		strs = append(strs, pair[0].(string)+" "+pair[1].(string))
	}
	model["merges"] = strs
	data, err := json.Marshal(m)
	require.NoError(t, err)
	tok, err := tokenizer.Parse(data, nil)
	require.NoError(t, err)
	ref := tokenizers(t)["handmade"]
	for _, s := range []string{"the quick brown fox", "tokenizers split words", "It's [NAME] <mask> here"} {
		assert.Equal(t, ref.EncodeWith(s, true), tok.EncodeWith(s, true), "%q", s)
	}
}

func FuzzEncodeDecodeRoundTrip(f *testing.F) {
	for _, s := range []string{"", "hello world", "  \n\t x", "你好😀", "e\u0301", "<|im_start|>user\nhi<|im_end|>",
		"a\xffb", "it's 'LL", strings.Repeat("ab ", 50)} {
		f.Add(s)
	}
	tok := tokenizers(f)["qwen3"]
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := tok.Encode(s)
		require.NoError(t, err)
		got, err := tok.Decode(ids, false)
		require.NoError(t, err)
		// The NFC normalizer rewrites non-NFC text, and invalid bytes become U+FFFD: the round trip is exact
		// for valid text in NFC.
		clean := strings.ToValidUTF8(s, "\ufffd")
		if utf8.ValidString(s) && norm.NFC.IsNormalString(s) {
			assert.Equal(t, s, got)
		} else if norm.NFC.IsNormalString(clean) {
			assert.True(t, utf8.ValidString(got))
		}
	})
}

func FuzzDecodeNeverPanics(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	tok := tokenizers(f)["qwen3"]
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids := make([]int32, len(raw)/4)
		for i := range ids {
			v := int32(raw[4*i]) | int32(raw[4*i+1])<<8 | int32(raw[4*i+2])<<16 | int32(raw[4*i+3])<<24
			ids[i] = v % 160000
		}
		inRange := true
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() {
				inRange = false
			}
		}
		s, err := tok.Decode(ids, false)
		if !inRange {
			assert.ErrorIs(t, err, tokenizer.ErrUnknownID)
			return
		}
		require.NoError(t, err)
		assert.True(t, utf8.ValidString(s))
	})
}

func FuzzParse(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "handmade", "tokenizer.json"))
	require.NoError(f, err)
	f.Add(data)
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},"decoder":{"type":"ByteLevel"}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":-1}},"decoder":{"type":"ByteLevel"},"added_tokens":[{"id":5,"content":"x"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := tokenizer.Parse(data, nil)
		if err != nil {
			return
		}
		ids := tok.EncodeWith("fuzz the parser: 123 héllo\n", true)
		_, err = tok.Decode(ids, false)
		assert.NoError(t, err)
	})
}

func TestLoadReadsGzip(t *testing.T) {
	// testdata/qwen3 only has tokenizer.json.gz; a plain tokenizer.json is preferred when both exist.
	f, err := os.Open(filepath.Join("testdata", "qwen3", "tokenizer.json.gz"))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = io.Copy(&buf, zr)
	require.NoError(t, err)
	dir := testmodel.Files(t, map[string]string{"tokenizer.json": buf.String(), "tokenizer.json.gz": "not gzip"})
	tok, err := tokenizer.Load(dir)
	require.NoError(t, err)
	assert.Equal(t, 151669, tok.VocabSize())
}
