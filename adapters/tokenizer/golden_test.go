package tokenizer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/tokenizer"
)

// The goldens come from tools/goldens/tokenizer/make_goldens.py run with Hugging Face tokenizers; they are
// regenerated there, not here.

type encodeGolden struct {
	Versions map[string]string `json:"versions"`
	Cases    []struct {
		Text               string  `json:"text"`
		IDs                []int32 `json:"ids"`
		Decoded            string  `json:"decoded"`
		DecodedSkipSpecial string  `json:"decoded_skip_special"`
	} `json:"cases"`
}

type decodeGolden struct {
	Cases []struct {
		IDs                []int32 `json:"ids"`
		Decoded            string  `json:"decoded"`
		DecodedSkipSpecial string  `json:"decoded_skip_special"`
	} `json:"cases"`
}

var (
	loadOnce sync.Once
	loaded   map[string]*tokenizer.Tokenizer
	loadErr  error
)

// tokenizers loads the checked-in tokenizers once per test binary (Qwen3 takes about half a second).
func tokenizers(t testing.TB) map[string]*tokenizer.Tokenizer {
	t.Helper()
	loadOnce.Do(func() {
		loaded = map[string]*tokenizer.Tokenizer{}
		for _, name := range []string{"qwen3", "handmade"} {
			tok, err := tokenizer.Load(filepath.Join("testdata", name))
			if err != nil {
				loadErr = err
				return
			}
			loaded[name] = tok
		}
	})
	require.NoError(t, loadErr)
	return loaded
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, v))
}

func TestEncodeMatchesHuggingFace(t *testing.T) {
	toks := tokenizers(t)
	for _, name := range []string{"qwen3", "handmade"} {
		t.Run(name, func(t *testing.T) {
			var g encodeGolden
			readJSON(t, filepath.Join("testdata", name+"_encode.json"), &g)
			require.GreaterOrEqual(t, len(g.Cases), 600)
			tok := toks[name]
			mismatches := 0
			for i, c := range g.Cases {
				got, err := tok.Encode(c.Text)
				require.NoError(t, err)
				if !assert.Equal(t, c.IDs, nonNilIDs(got), "case %d %q", i, c.Text) {
					mismatches++
				}
				dec, err := tok.Decode(c.IDs, false)
				require.NoError(t, err)
				assert.Equal(t, c.Decoded, dec, "decode case %d", i)
				dec, err = tok.Decode(c.IDs, true)
				require.NoError(t, err)
				assert.Equal(t, c.DecodedSkipSpecial, dec, "decode skip-special case %d", i)
				if mismatches > 10 {
					t.Fatal("too many mismatches")
				}
			}
		})
	}
}

func nonNilIDs(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

func TestDecodeMatchesHuggingFace(t *testing.T) {
	toks := tokenizers(t)
	for _, name := range []string{"qwen3", "handmade"} {
		t.Run(name, func(t *testing.T) {
			var g decodeGolden
			readJSON(t, filepath.Join("testdata", name+"_decode.json"), &g)
			require.NotEmpty(t, g.Cases)
			tok := toks[name]
			for i, c := range g.Cases {
				got, err := tok.Decode(c.IDs, false)
				require.NoError(t, err)
				assert.Equal(t, c.Decoded, got, "case %d %v", i, c.IDs)
				got, err = tok.Decode(c.IDs, true)
				require.NoError(t, err)
				assert.Equal(t, c.DecodedSkipSpecial, got, "skip-special case %d %v", i, c.IDs)

				// The stream decoder must give the same text piece by piece.
				sd := tok.NewStreamDecoder(false)
				var all string
				for _, id := range c.IDs {
					piece, err := sd.Push(id)
					require.NoError(t, err)
					all += piece
				}
				all += sd.Flush()
				assert.Equal(t, c.Decoded, all, "stream case %d %v", i, c.IDs)
			}
		})
	}
}
