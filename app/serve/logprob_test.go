package serve

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/httpapi"
	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/ports"
)

// lpServer serves e with cfg over the real OpenAI adapter and returns an official SDK client.
func lpServer(t *testing.T, cfg ServeConfig, e Engine) (*Serve, openai.Client) {
	t.Helper()
	s, err := NewServe(cfg, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(e))
	host := httpapi.New(s, httpapi.Options{Log: zerolog.Nop()})
	oaiapi.New(s, oaiapi.Options{Host: host, Log: zerolog.Nop()})
	srv := httptest.NewServer(host)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	return s, openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
}

// wireLP is one token's logprobs as the SDK read them.
type wireLP struct {
	Token   string
	Logprob float64
	Bytes   []int64
	Top     []string
	TopLP   []float64
}

func chatLPs(c []openai.ChatCompletionTokenLogprob) []wireLP {
	out := make([]wireLP, len(c))
	for i, e := range c {
		w := wireLP{Token: e.Token, Logprob: e.Logprob, Bytes: e.Bytes}
		for _, a := range e.TopLogprobs {
			w.Top, w.TopLP = append(w.Top, a.Token), append(w.TopLP, a.Logprob)
		}
		out[i] = w
	}
	return out
}

// fakeLogSoftmax is the direct computation on the toy model: log softmax of its logits after history, as its
// sessions hand them out (float32).
func fakeLogSoftmax(t *testing.T, target *srvTarget, history []ports.Token) []float64 {
	t.Helper()
	lg, err := target.Logits(history)
	require.NoError(t, err)
	mx := math.Inf(-1)
	for _, v := range lg {
		mx = max(mx, float64(float32(v)))
	}
	var sum float64
	for _, v := range lg {
		sum += math.Exp(float64(float32(v)) - mx)
	}
	out := make([]float64, len(lg))
	for j, v := range lg {
		out[j] = float64(float32(v)) - mx - math.Log(sum)
	}
	return out
}

// TestE2ELogprobsExactUnderSpeculation: chat logprobs read by the official SDK are the target's own at every
// position — the same bits at block sizes 1, 2 and 4 (the drafter's), under the adaptive policy, batched
// with other requests, streamed or not — and equal to the log-softmax of the
// toy model's logits.
func TestE2ELogprobsExactUnderSpeculation(t *testing.T) {
	leakCheck(t)
	eng, target := srvEngine(4096, 0, false)
	const prompt = "tell me about logprobs"
	params := openai.ChatCompletionNewParams{Model: "toy", Messages: userMsg(prompt), MaxTokens: openai.Int(40),
		Temperature: openai.Float(0), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(5)}
	_, base := lpServer(t, ServeConfig{MaxConcurrency: 1, QueueSize: 4}, eng)
	resp, err := base.Chat.Completions.New(t.Context(), params, option.WithJSONSet("block_size", 1))
	require.NoError(t, err)
	want := chatLPs(resp.Choices[0].Logprobs.Content)
	require.NotEmpty(t, want)

	// The direct computation, token by token.
	text, err := srvTemplate{}.Render([]ports.ChatMessage{{Role: "user", Content: prompt}}, ports.ChatOptions{AddGenerationPrompt: true})
	require.NoError(t, err)
	history := srvTokens(text)
	var content strings.Builder
	for i, w := range want {
		ls := fakeLogSoftmax(t, target, history)
		tok := srvTokens(w.Token)
		require.Len(t, tok, 1, "token %d %q", i, w.Token)
		assert.InDelta(t, ls[tok[0]], w.Logprob, 1e-9, "token %d", i)
		assert.Equal(t, []int64{int64(w.Token[0])}, w.Bytes)
		require.Len(t, w.Top, 5)
		for j := range w.Top {
			assert.InDelta(t, ls[srvTokens(w.Top[j])[0]], w.TopLP[j], 1e-9)
			if j > 0 {
				assert.GreaterOrEqual(t, w.TopLP[j-1], w.TopLP[j], "top_logprobs sorted")
			}
		}
		assert.Equal(t, w.Token, w.Top[0], "greedy: the chosen token is the most likely")
		content.WriteString(w.Token)
		history = append(history, tok[0])
	}
	assert.Equal(t, resp.Choices[0].Message.Content, content.String(), "one entry per output token")

	run := func(t *testing.T, c openai.Client, opts ...option.RequestOption) {
		t.Helper()
		got, err := c.Chat.Completions.New(t.Context(), params, opts...)
		require.NoError(t, err)
		assert.Equal(t, want, chatLPs(got.Choices[0].Logprobs.Content))
		assert.Equal(t, resp.Choices[0].Message.Content, got.Choices[0].Message.Content)
		stream := c.Chat.Completions.NewStreaming(t.Context(), params, opts...)
		var streamed []openai.ChatCompletionTokenLogprob
		for stream.Next() {
			if ch := stream.Current(); len(ch.Choices) > 0 {
				streamed = append(streamed, ch.Choices[0].Logprobs.Content...)
			}
		}
		require.NoError(t, stream.Err())
		require.NoError(t, stream.Close())
		assert.Equal(t, want, chatLPs(streamed), "streamed equals non-streamed")
	}
	for _, bs := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("block %d", bs), func(t *testing.T) { run(t, base, option.WithJSONSet("block_size", bs)) })
	}
	t.Run("adaptive", func(t *testing.T) {
		_, c := lpServer(t, ServeConfig{MaxConcurrency: 1, QueueSize: 4, Adaptive: true}, eng)
		run(t, c)
	})
	// The fake engine's sessions export no prefixes: the prefix cache is covered by app/generation's test
	// (portfake) and TestE2EDemoLogprobs (the CPU backend).
	t.Run("batched", func(t *testing.T) {
		_, c := lpServer(t, ServeConfig{MaxConcurrency: 4, QueueSize: 8}, eng)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				other := params
				other.Messages = userMsg(fmt.Sprintf("something else %d", i))
				_, err := c.Chat.Completions.New(t.Context(), other, option.WithJSONSet("block_size", 1+i%4))
				assert.NoError(t, err)
			})
			wg.Go(func() { run(t, c, option.WithJSONSet("block_size", 1+i%4)) })
		}
		wg.Wait()
	})
	t.Run("without logprobs", func(t *testing.T) {
		p := params
		p.Logprobs, p.TopLogprobs = openai.Bool(false), openai.Int(0)
		got, err := base.Chat.Completions.New(t.Context(), p)
		require.NoError(t, err)
		assert.Contains(t, got.RawJSON(), `"logprobs":null`)
	})
}

// TestE2ECompletionLogprobs: /v1/completions' legacy shape — tokens, token_logprobs, top_logprobs (the
// chosen token among them) and text_offset — streamed and not, cut with the text at a stop string.
func TestE2ECompletionLogprobs(t *testing.T) {
	leakCheck(t)
	eng, target := srvEngine(4096, 0, true)
	_, c := lpServer(t, ServeConfig{MaxConcurrency: 1, QueueSize: 4}, eng)
	const prompt = "once upon a time"
	params := openai.CompletionNewParams{Model: "toy", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(30), Temperature: openai.Float(0), Logprobs: openai.Int(3)}
	resp, err := c.Completions.New(t.Context(), params)
	require.NoError(t, err)
	ch := resp.Choices[0]
	lp := ch.Logprobs
	require.Len(t, lp.Tokens, 30)
	assert.Equal(t, ch.Text, strings.Join(lp.Tokens, ""))
	history := srvTokens(prompt)
	for i, tok := range lp.Tokens {
		assert.Equal(t, int64(i), lp.TextOffset[i])
		ls := fakeLogSoftmax(t, target, history)
		id := srvTokens(tok)[0]
		assert.InDelta(t, ls[id], lp.TokenLogprobs[i], 1e-9)
		assert.Contains(t, lp.TopLogprobs[i], tok, "the chosen token is among top_logprobs")
		assert.LessOrEqual(t, len(lp.TopLogprobs[i]), 4)
		history = append(history, id)
	}

	stream := c.Completions.NewStreaming(t.Context(), params)
	var toks []string
	var lps []float64
	var offsets []int64
	for stream.Next() {
		if cur := stream.Current(); len(cur.Choices) > 0 {
			toks = append(toks, cur.Choices[0].Logprobs.Tokens...)
			lps = append(lps, cur.Choices[0].Logprobs.TokenLogprobs...)
			offsets = append(offsets, cur.Choices[0].Logprobs.TextOffset...)
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	assert.Equal(t, lp.Tokens, toks)
	assert.Equal(t, lp.TokenLogprobs, lps)
	assert.Equal(t, lp.TextOffset, offsets)

	// A stop string inside the output: the entries end with the text.
	stop := ch.Text[10:13]
	params.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String(stop)}
	cut, err := c.Completions.New(t.Context(), params, option.WithJSONSet("block_size", 4))
	require.NoError(t, err)
	require.Equal(t, "stop", string(cut.Choices[0].FinishReason))
	assert.Equal(t, cut.Choices[0].Text, strings.Join(cut.Choices[0].Logprobs.Tokens, ""))
	assert.Equal(t, lp.TokenLogprobs[:len(cut.Choices[0].Logprobs.Tokens)], cut.Choices[0].Logprobs.TokenLogprobs)
}

// TestE2EDemoLogprobs: on the bundled demo target and drafter (CPU backend, exact kernels), every output
// token's log-probability is bit-identical at block sizes 1, 2, 4 and the drafter's 16, under the adaptive
// policy, batched with other requests and after a prefix-cache hit, streamed or not, and equals the
// log-softmax of the target's own logits at that position (one forward of the whole sequence), bit for bit.
func TestE2EDemoLogprobs(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the real demo models; skipped with -short")
	}
	root := filepath.Join("..", "..", models.DemoTargetDir)
	if _, err := os.Stat(filepath.Join(root, "config.json")); err != nil {
		t.Fatalf("the bundled demo model %s is absent", root)
	}
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: root, Draft: filepath.Join("..", "..", models.DemoDrafterDir)}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.Equal(t, 16, m.Drafter.BlockSize())
	const prompt = "func main() {\n\tfmt.Println("
	req := ports.GenerateRequest{Prompt: prompt, MaxTokens: 24, Logprobs: true, TopLogprobs: 4}
	gen := func(t *testing.T, s *Serve, bs int) ports.GenerateResult {
		t.Helper()
		r := req
		r.BlockSize = bs
		res, err := s.Generate(t.Context(), r, nil)
		require.NoError(t, err)
		require.Len(t, res.Logprobs, res.CompletionTokens-btoi(res.FinishReason == "stop" && res.StopSequence == ""))
		return res
	}
	plain := newDemoServe(t, m, ServeConfig{MaxConcurrency: 1, QueueSize: 4})
	want := gen(t, plain, 1)
	require.NotEmpty(t, want.Logprobs)

	// The direct computation: one forward of prompt and output with every row's logits.
	ids, err := m.Tokenizer.Encode(prompt)
	require.NoError(t, err)
	seq := append([]ports.Token{}, ids...)
	for _, lp := range want.Logprobs {
		seq = append(seq, lp.Token)
	}
	sess, err := m.Target.NewSession(t.Context(), nil)
	require.NoError(t, err)
	fr, err := sess.Forward(t.Context(), seq[:len(seq)-1], ports.ForwardOptions{Logits: true})
	require.NoError(t, err)
	require.NoError(t, sess.Close())
	v := m.Target.Info().VocabSize
	var text strings.Builder
	for i, lp := range want.Logprobs {
		r := len(ids) - 1 + i
		row := fr.Logits[r*v : (r+1)*v]
		lse, err := sampling.LogSumExp(row)
		require.NoError(t, err)
		// Bit-equal: the CPU backend's exact kernels give a row the same bits however positions are grouped.
		assert.Equal(t, float64(row[lp.Token])-lse, lp.Logprob, "token %d", i)
		require.Len(t, lp.Top, 4)
		assert.Equal(t, lp.Token, lp.Top[0].Token, "greedy: the chosen token is the most likely")
		for j := 1; j < len(lp.Top); j++ {
			assert.GreaterOrEqual(t, lp.Top[j-1].Logprob, lp.Top[j].Logprob)
		}
		text.Write(lp.Bytes)
	}
	assert.Equal(t, want.Content, text.String())

	same := func(t *testing.T, got ports.GenerateResult) {
		t.Helper()
		assert.Equal(t, want.Content, got.Content)
		require.Equal(t, len(want.Logprobs), len(got.Logprobs))
		for i := range want.Logprobs {
			assert.Equal(t, math.Float64bits(want.Logprobs[i].Logprob), math.Float64bits(got.Logprobs[i].Logprob), "token %d", i)
			assert.Equal(t, want.Logprobs[i].Top, got.Logprobs[i].Top, "token %d", i)
		}
	}
	for _, bs := range []int{2, 4, 16} {
		t.Run(fmt.Sprintf("block %d", bs), func(t *testing.T) {
			res := gen(t, plain, bs)
			if bs > 1 {
				assert.Positive(t, res.Spec.Accepted, "drafts were accepted")
			}
			same(t, res)
		})
	}
	t.Run("adaptive", func(t *testing.T) {
		same(t, gen(t, newDemoServe(t, m, ServeConfig{MaxConcurrency: 1, QueueSize: 4, Adaptive: true}), 0))
	})
	t.Run("prefix cache", func(t *testing.T) {
		s := newDemoServe(t, m, ServeConfig{MaxConcurrency: 1, QueueSize: 4, PrefixCacheBytes: 1 << 26, PrefixCacheEvery: 4})
		same(t, gen(t, s, 4))
		hit := gen(t, s, 16)
		assert.Positive(t, hit.CachedTokens, "a prefix-cache hit")
		same(t, hit)
	})
	t.Run("batched", func(t *testing.T) {
		s := newDemoServe(t, m, ServeConfig{MaxConcurrency: 3, QueueSize: 8})
		var wg sync.WaitGroup
		res := make([]ports.GenerateResult, 3)
		for i, bs := range []int{1, 4, 16} {
			wg.Go(func() {
				r := req
				r.BlockSize = bs
				var err error
				res[i], err = s.Generate(t.Context(), r, nil)
				assert.NoError(t, err)
			})
		}
		wg.Go(func() {
			_, err := s.Generate(t.Context(), ports.GenerateRequest{Prompt: "package main", MaxTokens: 24}, nil)
			assert.NoError(t, err)
		})
		wg.Wait()
		for _, r := range res {
			same(t, r)
		}
	})
	t.Run("constrained", func(t *testing.T) {
		// Under a constraint the values are of the masked distribution, the same at every block size.
		var first []ports.TokenLogprob
		for _, bs := range []int{1, 4, 16} {
			r := req
			r.BlockSize, r.TopLogprobs = bs, ports.MaxTopLogprobs
			r.Constraint = &ports.Constraint{Kind: ports.ConstrainJSONObject, Param: "response_format"}
			res, err := plain.Generate(t.Context(), r, nil)
			require.NoError(t, err)
			require.NotEmpty(t, res.Logprobs)
			for _, lp := range res.Logprobs {
				assert.False(t, math.IsInf(lp.Logprob, -1), "an emitted token is allowed")
				var sum float64
				for _, alt := range lp.Top {
					sum += math.Exp(alt.Logprob)
				}
				assert.LessOrEqual(t, sum, 1+1e-9)
			}
			if first == nil {
				first = res.Logprobs
			} else {
				assert.Equal(t, first, res.Logprobs, "block %d", bs)
			}
		}
	})
	t.Run("streamed", func(t *testing.T) {
		var streamed []ports.TokenLogprob
		r := req
		r.BlockSize = 16
		res, err := plain.Generate(t.Context(), r, func(ev ports.GenerateEvent) error {
			streamed = append(streamed, ev.Logprobs...)
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, res.Logprobs, streamed)
		same(t, res)
	})
}

func newDemoServe(t *testing.T, m *models.Models, cfg ServeConfig) *Serve {
	t.Helper()
	s, err := NewServe(cfg, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(EngineFromModels(m)))
	return s
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pieceDecoder decodes ids through a table of pieces; "" holds part of a character (bytes given by raw).
type pieceDecoder struct{ pieces map[ports.Token]string }

func (d pieceDecoder) Push(id ports.Token) (string, error) { return d.pieces[id], nil }
func (pieceDecoder) Flush() string                         { return "" }

// pieceTokenizer spells ids by their raw bytes (ports.TokenBytes).
type pieceTokenizer struct {
	srvTokenizer
	raw map[ports.Token][]byte
}

func (p pieceTokenizer) TokenBytes(id ports.Token) ([]byte, bool, bool) {
	b, ok := p.raw[id]
	return b, false, ok
}

// The text pipe releases each token's entry with its text: a token whose text a stop string's prefix holds
// back waits, the tokens of the stop string are dropped with it, and a token holding part of a character
// carries its own bytes.
func TestTextPipeReleasesLogprobsWithText(t *testing.T) {
	// 1 "a", 2 "x", 3 "y", 4 and 5 the two bytes of "é" (the first decodes to nothing), 6 "b".
	raw := map[ports.Token][]byte{1: []byte("a"), 2: []byte("x"), 3: []byte("y"), 4: {0xc3}, 5: {0xa9}, 6: []byte("b")}
	dec := pieceDecoder{pieces: map[ports.Token]string{1: "a", 2: "x", 3: "y", 4: "", 5: "é", 6: "b"}}
	lps := func(ids ...ports.Token) []ports.TokenLogprob {
		out := make([]ports.TokenLogprob, len(ids))
		for i, id := range ids {
			out[i] = ports.TokenLogprob{Token: id, Logprob: -float64(id)}
		}
		return out
	}
	var events []ports.GenerateEvent
	p := newTextPipe(dec, []string{"xy"}, false, false, map[ports.Token]bool{9: true}, func(ev ports.GenerateEvent) error {
		events = append(events, ev)
		return nil
	})
	p.lp = newLogprobText(pieceTokenizer{raw: raw})
	require.NoError(t, p.pushLogprobs([]ports.Token{4, 5, 1, 2}, lps(4, 5, 1, 2)))
	require.Len(t, events, 1)
	assert.Equal(t, "éa", events[0].Content)
	require.Len(t, events[0].Logprobs, 3, "x waits with its text")
	assert.Equal(t, []byte{0xc3}, events[0].Logprobs[0].Bytes)
	assert.Equal(t, "\uFFFD", events[0].Logprobs[0].Text)
	assert.Equal(t, []int{0, 0, 1}, []int{events[0].Logprobs[0].Offset, events[0].Logprobs[1].Offset, events[0].Logprobs[2].Offset})
	err := p.pushLogprobs([]ports.Token{3, 6, 9}, lps(3, 6, 9))
	require.ErrorIs(t, err, errStopString)
	require.NoError(t, p.finish())
	for _, ev := range events[1:] {
		assert.Empty(t, ev.Logprobs, "the stop string's tokens and those after it have no entry")
	}
	assert.Equal(t, []ports.Token{4, 5, 1}, tokensOf(p.lp.all))

	// Without a stop string every token but the stop token has an entry, released by the end.
	events = nil
	p = newTextPipe(dec, nil, false, false, map[ports.Token]bool{9: true}, func(ev ports.GenerateEvent) error {
		events = append(events, ev)
		return nil
	})
	p.lp = newLogprobText(pieceTokenizer{raw: raw})
	require.NoError(t, p.pushLogprobs([]ports.Token{1, 4}, lps(1, 4)))
	require.NoError(t, p.pushLogprobs([]ports.Token{5, 9}, lps(5, 9)))
	require.NoError(t, p.finish())
	var streamed []ports.TokenLogprob
	for _, ev := range events {
		streamed = append(streamed, ev.Logprobs...)
	}
	assert.Equal(t, []ports.Token{1, 4, 5}, tokensOf(streamed))
	assert.Equal(t, p.lp.all, streamed)
}

func tokensOf(lps []ports.TokenLogprob) []ports.Token {
	var out []ports.Token
	for _, lp := range lps {
		out = append(out, lp.Token)
	}
	return out
}
