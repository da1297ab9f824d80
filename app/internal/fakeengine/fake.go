// Package fakeengine is the toy engine the serving tests and higgsd's runner tests share: a portfake hybrid
// target behind a one-byte-per-character tokenizer and a bracket chat template, with a scripted drafter, the
// target's sessions counted and optionally slowed or made to panic.
package fakeengine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// The serving tests run the real Serve use case and the real speculative decoder over portfake's toy
// hybrid model and scripted drafter, with a tiny tokenizer whose every token is one character, so that no
// test depends on real weights.

// Alphabet is the fake tokenizer's text vocabulary: id i is Alphabet[i].
const Alphabet = " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345678"

const (
	EOS        ports.Token = 62 // "<|end|>", special, the model's stop token
	ThinkOpen  ports.Token = 63 // "<think>", not special (as in Qwen3)
	ThinkClose ports.Token = 64
	ModelVocab             = 63 // the toy model only produces alphabet and EOS
)

var specials = map[string]ports.Token{"<|end|>": EOS, "<think>": ThinkOpen, "</think>": ThinkClose}

// encoded are the specials Encode recognises; the think tags are left out because they lie outside the
// toy model's vocabulary (the model never produces them; Serve only asks TokenID whether they exist).
var encoded = map[string]ports.Token{"<|end|>": EOS}

// Tokenizer is ports.Tokenizer over Alphabet; characters outside it encode as a space.
type Tokenizer struct{}

var _ ports.Tokenizer = Tokenizer{}

func (Tokenizer) Encode(text string) ([]ports.Token, error) {
	var out []ports.Token
outer:
	for len(text) > 0 {
		for s, id := range encoded {
			if strings.HasPrefix(text, s) {
				out = append(out, id)
				text = text[len(s):]
				continue outer
			}
		}
		r := text[0]
		text = text[1:]
		if i := strings.IndexByte(Alphabet, r); i >= 0 {
			out = append(out, ports.Token(i))
		} else {
			out = append(out, 0)
		}
	}
	return out, nil
}

func piece(id ports.Token, skipSpecial bool) (string, error) {
	switch {
	case id >= 0 && int(id) < len(Alphabet):
		return Alphabet[id : id+1], nil
	case id == EOS && skipSpecial:
		return "", nil
	}
	for s, v := range specials {
		if v == id {
			return s, nil
		}
	}
	return "", fmt.Errorf("token %d outside the vocabulary", id)
}

func (Tokenizer) Decode(ids []ports.Token, skipSpecial bool) (string, error) {
	var sb strings.Builder
	for _, id := range ids {
		s, err := piece(id, skipSpecial)
		if err != nil {
			return "", err
		}
		sb.WriteString(s)
	}
	return sb.String(), nil
}

func (Tokenizer) NewStreamDecoder(skipSpecial bool) ports.StreamDecoder {
	return &stream{skip: skipSpecial}
}

func (Tokenizer) TokenID(token string) (ports.Token, bool) {
	id, ok := specials[token]
	return id, ok
}

func (Tokenizer) VocabSize() int { return 65 }

type stream struct{ skip bool }

func (s *stream) Push(id ports.Token) (string, error) { return piece(id, s.skip) }
func (s *stream) Flush() string                       { return "" }

// Template renders "[role]: content" lines and the assistant prompt; enable_thinking true opens a think
// block in the prompt, as Qwen3.5's template does.
type Template struct{}

func (Template) Render(msgs []ports.ChatMessage, opts ports.ChatOptions) (string, error) {
	var sb strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&sb, "[%s]: %s\n", m.Role, m.Content)
	}
	if opts.AddGenerationPrompt {
		sb.WriteString("[assistant]: ")
		if opts.EnableThinking != nil && *opts.EnableThinking {
			sb.WriteString("<think>\n")
		}
	}
	return sb.String(), nil
}

// Target wraps the toy model to count and slow down Forward calls and to count open sessions, so tests
// can see that a cancelled request stops and frees the engine.
type Target struct {
	// model is held, not embedded: an embedded one would promote portfake's ForwardBatch, which refuses the
	// wrapped sessions this target hands out.
	model    *portfake.Model
	Delay    time.Duration
	Forwards atomic.Int64
	Open     atomic.Int64
	Opened   atomic.Int64
	// PanicOn makes the n-th Forward (1-based, over all sessions) panic; 0 never.
	PanicOn int64
	// Price is what its sessions claim to hold (memory admission; zero: nothing).
	Price portfake.Price
}

// SessionBytes prices a session by t.Price (ports.MemoryPricer).
func (t *Target) SessionBytes(d ports.MemoryDemand) int64 { return t.Price.SessionBytes(d) }

func (t *Target) NewSession(ctx context.Context, taps []int) (ports.Session, error) {
	s, err := t.model.NewSession(ctx, taps)
	if err != nil {
		return nil, err
	}
	t.Open.Add(1)
	t.Opened.Add(1)
	return &session{Session: s, t: t}, nil
}

// Info describes the toy model.
func (t *Target) Info() ports.ModelInfo { return t.model.Info() }

// GreedyContinuation is the toy model's greedy continuation (the tests' oracle).
func (t *Target) GreedyContinuation(history []ports.Token, n int) ([]ports.Token, error) {
	return t.model.GreedyContinuation(history, n)
}

// Logits are the toy model's next-token logits after history, computed from scratch (the tests' oracle for
// log-probabilities).
func (t *Target) Logits(history []ports.Token) ([]float64, error) { return t.model.Logits(history) }

type session struct {
	ports.Session
	t      *Target
	closed bool
}

func (s *session) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	n := s.t.Forwards.Add(1)
	if s.t.PanicOn > 0 && n == s.t.PanicOn {
		panic("Target: injected panic")
	}
	if s.t.Delay > 0 {
		time.Sleep(s.t.Delay)
	}
	return s.Session.Forward(ctx, tokens, opts)
}

// ExportPrefix and ImportPrefix hand the prefix cache the toy model's own session state
// (ports.PrefixExporter), so that serving tests can watch the cache.
func (s *session) ExportPrefix(n int) (ports.PrefixState, error) {
	return s.Session.(ports.PrefixExporter).ExportPrefix(n)
}

func (s *session) ImportPrefix(p ports.PrefixState) error {
	return s.Session.(ports.PrefixExporter).ImportPrefix(p)
}

var _ ports.PrefixExporter = (*session)(nil)

func (s *session) Close() error {
	if !s.closed {
		s.closed = true
		s.t.Open.Add(-1)
	}
	return s.Session.Close()
}

// Parts are the fake engine's components (the serving tests assemble their serve.Engine from them).
type Parts struct {
	Target    *Target
	Drafter   ports.Drafter
	Tokenizer Tokenizer
	Template  Template
	EOS       []ports.Token
}

// New builds the fake engine: a hybrid toy model (attention + recurrent layers) with EOS, and a scripted
// drafter of block size 4 whose proposals are right for a varying number of slots. With noEOS the model
// never stops by itself (the toy model still produces the EOS id now and then, but it is then an ordinary
// token), so only max_tokens, a stop string or cancellation end a generation.
func New(ctxLen int, delay time.Duration, noEOS bool) Parts {
	eos := []ports.Token{EOS}
	if noEOS {
		eos = nil
	}
	m := portfake.MustNew(portfake.Config{Vocab: ModelVocab, ContextLength: ctxLen, Seed: 7, EOS: eos})
	t := &Target{model: m, Delay: delay}
	d, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, TapLayers: []int{0, 1},
		Propose: func(history []ports.Token, bs int) (ports.Proposal, error) {
			// Diverge after 0..3 right guesses depending on the position, so acceptance varies per slot.
			return portfake.MatchThenDiverge(m, len(history)%4)(history, bs)
		}})
	if err != nil {
		panic(err)
	}
	return Parts{Target: t, Drafter: d, Tokenizer: Tokenizer{}, Template: Template{}, EOS: eos}
}

// Tokens decodes fake-tokenizer text back to ids (for assertions on the toy model's output).
func Tokens(s string) []ports.Token {
	ids, _ := Tokenizer{}.Encode(s)
	return slices.Clip(ids)
}
