package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/httpapi"
	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/internal/testmodel"
	"github.com/higgs-go/higgs/ports"
)

// embedHarness is the real HTTP adapter over the real Serve, serving dir on the CPU backend without a
// drafter, with the official SDK pointed at it.
type embedHarness struct {
	m      *models.Models
	url    string
	hc     *http.Client
	client openai.Client
}

func newEmbedHarness(t *testing.T, dir string) *embedHarness {
	t.Helper()
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: dir, Draft: models.NoDraftName, Threads: 2}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 4}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(EngineFromModels(m)))
	host := httpapi.New(s, httpapi.Options{Log: zerolog.Nop()})
	oaiapi.New(s, oaiapi.Options{Host: host, Log: zerolog.Nop()})
	srv := httptest.NewServer(host)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	return &embedHarness{m: m, url: srv.URL, hc: hc, client: openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"),
		option.WithAPIKey("x"), option.WithMaxRetries(0), option.WithHTTPClient(hc))}
}

// want is the embedding of ids computed without the server: the target's pooled row, normalised.
func (h *embedHarness) want(t *testing.T, ids []ports.Token, dims int) []float32 {
	t.Helper()
	row, err := h.m.Target.(ports.Embedder).LastHidden(t.Context(), ids)
	require.NoError(t, err)
	return Normalize(row, dims)
}

// ids are text's tokens with <|endoftext|> appended where the tokenizer has it.
func (h *embedHarness) ids(t *testing.T, text string) []ports.Token {
	t.Helper()
	ids, err := h.m.Tokenizer.Encode(text)
	require.NoError(t, err)
	if eot, ok := h.m.Tokenizer.TokenID(EndOfText); ok {
		ids = append(ids, eot)
	}
	return ids
}

func (h *embedHarness) post(t *testing.T, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/v1/embeddings", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var raw json.RawMessage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
	return resp.StatusCode, raw
}

// decodeBase64 reads an embedding as OpenAI's SDKs do: little-endian float32s.
func decodeBase64(t *testing.T, s string) []float32 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	require.Zero(t, len(b)%4)
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func asFloat32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// Dense and hybrid targets on the CPU backend (the bundled demo is a Qwen3-Next MoE; Qwen3.5's layout is
// the backend's own tests' and goldens'), through the official SDK and raw HTTP: each input's embedding is the
// target's final-normed last row (after <|endoftext|> where the tokenizer has it) L2-normalised, bit for bit;
// a token input equals its text; base64 decodes to the same floats; usage counts the tokens run.
func TestE2EEmbeddings(t *testing.T) {
	cases := map[string]func(t *testing.T) string{
		"qwen3 dense": func(t *testing.T) string {
			dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 41, Vocab: testmodel.TokenizerVocab})
			testmodel.Tokenizer(t, dir)
			return dir
		},
		"qwen3_next hybrid": func(t *testing.T) string {
			dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3_next", Seed: 42, Vocab: testmodel.TokenizerVocab})
			testmodel.Tokenizer(t, dir)
			return dir
		},
		"bundled demo (qwen3_next moe)": func(t *testing.T) string {
			if testing.Short() {
				t.Skip("loads the bundled demo model; skipped with -short")
			}
			return filepath.Join("..", "..", models.DemoTargetDir)
		},
	}
	for name, dirOf := range cases {
		t.Run(name, func(t *testing.T) {
			h := newEmbedHarness(t, dirOf(t))
			hidden := h.m.Target.Info().HiddenSize
			texts := []string{"The quick brown fox", "func main() { fmt.Println(1) }"}
			res, err := h.client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
				Model: openai.EmbeddingModel(h.m.Name),
				Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
			})
			require.NoError(t, err)
			require.Len(t, res.Data, len(texts))
			tokens := 0
			for i, text := range texts {
				ids := h.ids(t, text)
				tokens += len(ids)
				assert.Equal(t, int64(i), res.Data[i].Index)
				got := asFloat32(res.Data[i].Embedding)
				require.Len(t, got, hidden)
				assert.Equal(t, h.want(t, ids, hidden), got, "input %d", i)
				var ss float64
				for _, v := range got {
					ss += float64(v) * float64(v)
				}
				assert.InDelta(t, 1, math.Sqrt(ss), 1e-5, "unit length")
			}
			assert.Equal(t, int64(tokens), res.Usage.PromptTokens)
			assert.Equal(t, int64(tokens), res.Usage.TotalTokens)

			// The first text's ids as token input (without the end-of-text token, which is appended) and as
			// the tokenizer leaves them with it (nothing more appended): the text's embedding both times;
			// base64 decodes to the same floats.
			ids := h.ids(t, texts[0])
			enc, err := h.m.Tokenizer.Encode(texts[0])
			require.NoError(t, err)
			for _, in := range [][]ports.Token{enc, ids} {
				body, err := json.Marshal(map[string]any{"input": [][]ports.Token{in}, "encoding_format": "base64"})
				require.NoError(t, err)
				status, raw := h.post(t, string(body))
				require.Equal(t, http.StatusOK, status, "%s", raw)
				var out struct {
					Object string `json:"object"`
					Data   []struct {
						Object    string `json:"object"`
						Embedding string `json:"embedding"`
					} `json:"data"`
					Usage struct {
						PromptTokens int `json:"prompt_tokens"`
					} `json:"usage"`
				}
				require.NoError(t, json.Unmarshal(raw, &out))
				assert.Equal(t, "list", out.Object)
				require.Len(t, out.Data, 1)
				assert.Equal(t, "embedding", out.Data[0].Object)
				assert.Equal(t, asFloat32(res.Data[0].Embedding), decodeBase64(t, out.Data[0].Embedding))
				assert.Equal(t, len(ids), out.Usage.PromptTokens)
			}
		})
	}
}

// dimensions: a model that ships last-token pooling (as Qwen3-Embedding does) accepts it within
// [min(32, hidden), hidden] and answers the first dimensions values normalised again; others refuse it.
func TestE2EEmbeddingsDimensions(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 43, Vocab: testmodel.TokenizerVocab})
	testmodel.Tokenizer(t, dir)
	plain := newEmbedHarness(t, dir)
	status, raw := plain.post(t, `{"input":"hello","dimensions":32}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, string(raw), `"param":"dimensions"`)

	require.NoError(t, os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, models.PoolingFile), []byte(`{"word_embedding_dimension": 64, "pooling_mode_lasttoken": true}`), 0o644))
	h := newEmbedHarness(t, dir)
	res, err := h.client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Input:      openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")},
		Dimensions: openai.Int(32),
	})
	require.NoError(t, err)
	require.Len(t, res.Data, 1)
	assert.Equal(t, h.want(t, h.ids(t, "hello"), 32), asFloat32(res.Data[0].Embedding))
	for _, d := range []int{31, 65} {
		status, raw := h.post(t, `{"input":"hello","dimensions":`+strconv.Itoa(d)+`}`)
		assert.Equal(t, http.StatusBadRequest, status, "dimensions %d", d)
		assert.Contains(t, string(raw), `"param":"dimensions"`)
	}

	// A model that pools otherwise is refused, saying how it pools.
	require.NoError(t, os.WriteFile(filepath.Join(dir, models.PoolingFile), []byte(`{"pooling_mode_mean_tokens": true}`), 0o644))
	mean := newEmbedHarness(t, dir)
	status, raw = mean.post(t, `{"input":"hello"}`)
	assert.Equal(t, http.StatusNotImplemented, status)
	assert.Contains(t, string(raw), `pools its embeddings by \"mean\"`)
}

// Bad input is a 400 naming the field; the context, the vocabulary and the model are checked.
func TestE2EEmbeddingsRefusals(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 44, Vocab: testmodel.TokenizerVocab, Context: 16})
	testmodel.Tokenizer(t, dir)
	h := newEmbedHarness(t, dir)
	long := strings.Repeat("0,", 16) + "0"
	for _, tc := range []struct {
		name, body, param string
		status            int
	}{
		{"no input", `{"model":"x"}`, "input", 400},
		{"empty string", `{"input":""}`, "input", 400},
		{"empty array", `{"input":[]}`, "input", 400},
		{"mixed", `{"input":["a",[1,2]]}`, "input", 400},
		{"empty token array", `{"input":[[]]}`, "input", 400},
		{"fractional id", `{"input":[1.5]}`, "input", 400},
		{"negative id", `{"input":[[1,-2]]}`, "input", 400},
		{"id outside the vocabulary", `{"input":[5, 100000]}`, "input", 400},
		{"past the context", `{"input":[` + long + `]}`, "input", 400},
		{"object", `{"input":{"a":1}}`, "input", 400},
		{"encoding", `{"input":"a","encoding_format":"int8"}`, "encoding_format", 400},
		{"dimensions zero", `{"input":"a","dimensions":0}`, "dimensions", 400},
		{"dimensions type", `{"input":"a","dimensions":"3"}`, "dimensions", 400},
		{"unknown model", `{"input":"a","model":"nope"}`, "model", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, raw := h.post(t, tc.body)
			assert.Equal(t, tc.status, status, "%s", raw)
			assert.Contains(t, string(raw), `"param":"`+tc.param+`"`)
		})
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/v1/embeddings", nil)
	require.NoError(t, err)
	resp, err := h.hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// An embeddings request waits in the generations' queue: with the only slot held and no room to wait, it
// is refused busy; once the slot is free it runs.
func TestEmbedSharesTheQueue(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 45, Vocab: testmodel.TokenizerVocab})
	testmodel.Tokenizer(t, dir)
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: dir, Draft: models.NoDraftName, Threads: 2}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 0}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(EngineFromModels(m)))
	release, err := s.gate.acquire(context.Background())
	require.NoError(t, err)
	req := ports.EmbedRequest{Inputs: []ports.EmbedInput{{Text: "hi"}}}
	_, err = s.Embed(t.Context(), req)
	assert.ErrorIs(t, err, ports.ErrBusy)
	release()
	res, err := s.Embed(t.Context(), req)
	require.NoError(t, err)
	assert.Len(t, res.Embeddings, 1)
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		h    []float32
		dims int
		want []float32
	}{
		{"whole", []float32{3, 4}, 2, []float32{0.6, 0.8}},
		{"truncated then normalised", []float32{0, -2, 7}, 2, []float32{0, -1}},
		{"zero stays zero", []float32{0, 0, 0}, 3, []float32{0, 0, 0}},
		{"norm below the 1e-12 floor is divided by the floor, as torch does", []float32{1e-30, 0}, 2, []float32{1e-18, 0}},
		{"small but above the floor", []float32{1e-6, 0}, 2, []float32{1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Normalize(tt.h, tt.dims)
			require.Len(t, got, len(tt.want))
			for i := range got {
				assert.InDelta(t, tt.want[i], got[i], 1e-7, "value %d", i)
			}
		})
	}
}

// An embeddings request whose longest input needs more memory than the budget can ever give is a 400
// naming input (as a generation's prompt that cannot fit is), at once: with a budget of its own and with a
// budget several models share, where it must not retry without end.
func TestEmbedOverTheBudget(t *testing.T) {
	dir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 46, Vocab: testmodel.TokenizerVocab})
	testmodel.Tokenizer(t, dir)
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: dir, Draft: models.NoDraftName, Threads: 2}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	for _, shared := range []bool{false, true} {
		t.Run("shared="+strconv.FormatBool(shared), func(t *testing.T) {
			s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 1, MemoryBudget: 1024}, zerolog.Nop())
			require.NoError(t, err)
			if shared {
				b, err := batch.NewBudget(1024)
				require.NoError(t, err)
				pressures := 0
				s.ShareMemory(&SharedMemory{Budget: b, Pressure: func(int64) <-chan struct{} {
					pressures++
					ch := make(chan struct{})
					close(ch) // something always changed: a retry loop would never wait
					return ch
				}})
				t.Cleanup(func() { assert.LessOrEqual(t, pressures, 1) })
			}
			require.NoError(t, s.SetEngine(EngineFromModels(m)))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err = s.Embed(ctx, ports.EmbedRequest{Inputs: []ports.EmbedInput{{Text: "hello there"}}})
			require.ErrorIs(t, err, ports.ErrInvalidRequest)
			require.ErrorIs(t, err, batch.ErrOverBudget)
			require.NoError(t, ctx.Err(), "refused at once, not when the context ended")
			var re *ports.RequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, "input", re.Param)
			assert.Equal(t, 0, s.gate.running(), "the queue slot is given back")
		})
	}
}
