package tokenizer_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"

	"github.com/higgs-go/higgs/adapters/tokenizer"
)

// demoDir is the bundled demo model's tokenizer, trained by tools/train/tok.py with Hugging Face tokenizers
// (Qwen-style: NFC, Split(Qwen regex) + ByteLevel). When testdata/demo_encode.json exists (written by
// tools/goldens/tokenizer/make_goldens.py while the demo model is present) its ids are checked too.
var demoDir = filepath.Join("..", "..", "models", "demo", "target")

func TestDemoTokenizer(t *testing.T) {
	if _, err := os.Stat(filepath.Join(demoDir, "tokenizer.json")); err != nil {
		t.Skipf("no demo tokenizer at %s: %v", demoDir, err)
	}
	tok, err := tokenizer.Load(demoDir)
	require.NoError(t, err)
	var g encodeGolden
	readJSON(t, filepath.Join("testdata", "qwen3_encode.json"), &g) // reuse the generated strings
	for i, c := range g.Cases {
		ids, err := tok.Encode(c.Text)
		require.NoError(t, err)
		got, err := tok.Decode(ids, false)
		require.NoError(t, err)
		if norm.NFC.IsNormalString(c.Text) {
			assert.Equal(t, c.Text, got, "round trip case %d", i)
		}
	}
	goldenPath := filepath.Join("testdata", "demo_encode.json")
	if _, err := os.Stat(goldenPath); err != nil {
		t.Logf("no %s: only the round trip was checked", goldenPath)
		return
	}
	var dg encodeGolden
	readJSON(t, goldenPath, &dg)
	for i, c := range dg.Cases {
		ids, err := tok.Encode(c.Text)
		require.NoError(t, err)
		assert.Equal(t, c.IDs, nonNilIDs(ids), "case %d %q", i, c.Text)
	}
}
