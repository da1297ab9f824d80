package openai

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func TestParseEmbeddings(t *testing.T) {
	tests := []struct {
		name, body string
		want       EmbeddingsRequest
		param      string
	}{
		{name: "string", body: `{"input":"hi","model":"m"}`,
			want: EmbeddingsRequest{Embed: ports.EmbedRequest{Model: "m", Inputs: []ports.EmbedInput{{Text: "hi"}}}}},
		{name: "strings", body: `{"input":["a","b"],"encoding_format":"base64"}`,
			want: EmbeddingsRequest{Base64: true, Embed: ports.EmbedRequest{Inputs: []ports.EmbedInput{{Text: "a"}, {Text: "b"}}}}},
		{name: "token ids", body: `{"input":[1,2,3],"encoding_format":"float","dimensions":8}`,
			want: EmbeddingsRequest{Embed: ports.EmbedRequest{Dimensions: 8, Inputs: []ports.EmbedInput{{Tokens: []ports.Token{1, 2, 3}}}}}},
		{name: "arrays of token ids", body: `{"input":[[1],[2,3]],"user":"u"}`,
			want: EmbeddingsRequest{Embed: ports.EmbedRequest{Inputs: []ports.EmbedInput{{Tokens: []ports.Token{1}}, {Tokens: []ports.Token{2, 3}}}}}},
		{name: "integral float id", body: `{"input":[2.0]}`,
			want: EmbeddingsRequest{Embed: ports.EmbedRequest{Inputs: []ports.EmbedInput{{Tokens: []ports.Token{2}}}}}},
		{name: "missing", body: `{}`, param: "input"},
		{name: "null", body: `{"input":null}`, param: "input"},
		{name: "empty string", body: `{"input":""}`, param: "input"},
		{name: "empty array", body: `{"input":[]}`, param: "input"},
		{name: "empty string item", body: `{"input":["a",""]}`, param: "input"},
		{name: "string then ids", body: `{"input":["a",[1]]}`, param: "input"},
		{name: "ids then string", body: `{"input":[1,"a"]}`, param: "input"},
		{name: "arrays then id", body: `{"input":[[1],2]}`, param: "input"},
		{name: "empty inner", body: `{"input":[[1],[]]}`, param: "input"},
		{name: "fraction", body: `{"input":[1.5]}`, param: "input"},
		{name: "negative", body: `{"input":[-1]}`, param: "input"},
		{name: "too large", body: `{"input":[4294967296]}`, param: "input"},
		{name: "bool", body: `{"input":true}`, param: "input"},
		{name: "object", body: `{"input":{}}`, param: "input"},
		{name: "format", body: `{"input":"a","encoding_format":"binary"}`, param: "encoding_format"},
		{name: "dimensions", body: `{"input":"a","dimensions":-3}`, param: "dimensions"},
		{name: "dimensions type", body: `{"input":"a","dimensions":1.5}`, param: "dimensions"},
		{name: "not an object", body: `[1]`, param: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEmbeddings([]byte(tt.body))
			if tt.want.Embed.Inputs == nil {
				require.Error(t, err)
				e := ErrorFor(err)
				assert.Equal(t, 400, e.Status)
				assert.Equal(t, tt.param, e.Param, e.Message)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestBase64Floats(t *testing.T) {
	v := []float32{1, -0.5, float32(math.Pi), 0, float32(math.Inf(1))}
	raw, err := base64.StdEncoding.DecodeString(Base64Floats(v))
	require.NoError(t, err)
	require.Len(t, raw, 4*len(v))
	for i, f := range v {
		assert.Equal(t, math.Float32bits(f), binary.LittleEndian.Uint32(raw[4*i:]), "value %d", i)
	}
	// 1.0 is 00 00 80 3f little-endian.
	assert.Equal(t, "AACAPw==", Base64Floats([]float32{1}))
}

func TestEmbeddingsOf(t *testing.T) {
	res := ports.EmbedResult{Model: "m", PromptTokens: 7, Embeddings: [][]float32{{1, 0}, {0, 1}}}
	out := EmbeddingsOf(res, false)
	assert.Equal(t, "list", out.Object)
	assert.Equal(t, EmbeddingsUsage{PromptTokens: 7, TotalTokens: 7}, out.Usage)
	require.Len(t, out.Data, 2)
	assert.Equal(t, EmbeddingItem{Object: "embedding", Index: 1, Embedding: []float32{0, 1}}, out.Data[1])
	b := EmbeddingsOf(res, true)
	assert.Equal(t, Base64Floats([]float32{1, 0}), b.Data[0].Embedding)
}

func FuzzParseEmbeddings(f *testing.F) {
	for _, s := range []string{`{"input":"hi"}`, `{"input":["a","b"]}`, `{"input":[1,2]}`, `{"input":[[1],[2,3]]}`,
		`{"input":[[1],"a"]}`, `{"input":"a","dimensions":3,"encoding_format":"base64"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseEmbeddings(body)
		if err != nil {
			assert.Equal(t, 400, ErrorFor(err).Status, "a refused body is a 400: %v", err)
			return
		}
		require.NotEmpty(t, req.Embed.Inputs)
		assert.GreaterOrEqual(t, req.Embed.Dimensions, 0)
		for _, in := range req.Embed.Inputs {
			if in.Tokens != nil {
				assert.NotEmpty(t, in.Tokens)
				for _, id := range in.Tokens {
					assert.GreaterOrEqual(t, id, ports.Token(0))
				}
			} else {
				assert.NotEmpty(t, in.Text)
			}
		}
	})
}
