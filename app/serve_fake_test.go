package app

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

// srvAlphabet is the fake tokenizer's text vocabulary: id i is srvAlphabet[i].
const srvAlphabet = " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345678"

const (
	srvEOS        ports.Token = 62 // "<|end|>", special, the model's stop token
	srvThinkOpen  ports.Token = 63 // "<think>", not special (as in Qwen3)
	srvThinkClose ports.Token = 64
	srvModelVocab             = 63 // the toy model only produces alphabet and EOS
)

var srvSpecials = map[string]ports.Token{"<|end|>": srvEOS, "<think>": srvThinkOpen, "</think>": srvThinkClose}

// srvEncoded are the specials Encode recognises; the think tags are left out because they lie outside the
// toy model's vocabulary (the model never produces them; Serve only asks TokenID whether they exist).
var srvEncoded = map[string]ports.Token{"<|end|>": srvEOS}

// srvTokenizer is ports.Tokenizer over srvAlphabet; characters outside it encode as a space.
type srvTokenizer struct{}

var _ ports.Tokenizer = srvTokenizer{}

func (srvTokenizer) Encode(text string) ([]ports.Token, error) {
	var out []ports.Token
outer:
	for len(text) > 0 {
		for s, id := range srvEncoded {
			if strings.HasPrefix(text, s) {
				out = append(out, id)
				text = text[len(s):]
				continue outer
			}
		}
		r := text[0]
		text = text[1:]
		if i := strings.IndexByte(srvAlphabet, r); i >= 0 {
			out = append(out, ports.Token(i))
		} else {
			out = append(out, 0)
		}
	}
	return out, nil
}

func srvPiece(id ports.Token, skipSpecial bool) (string, error) {
	switch {
	case id >= 0 && int(id) < len(srvAlphabet):
		return srvAlphabet[id : id+1], nil
	case id == srvEOS && skipSpecial:
		return "", nil
	}
	for s, v := range srvSpecials {
		if v == id {
			return s, nil
		}
	}
	return "", fmt.Errorf("token %d outside the vocabulary", id)
}

func (srvTokenizer) Decode(ids []ports.Token, skipSpecial bool) (string, error) {
	var sb strings.Builder
	for _, id := range ids {
		s, err := srvPiece(id, skipSpecial)
		if err != nil {
			return "", err
		}
		sb.WriteString(s)
	}
	return sb.String(), nil
}

func (srvTokenizer) NewStreamDecoder(skipSpecial bool) ports.StreamDecoder {
	return &srvStream{skip: skipSpecial}
}

func (srvTokenizer) TokenID(token string) (ports.Token, bool) {
	id, ok := srvSpecials[token]
	return id, ok
}

func (srvTokenizer) VocabSize() int { return 65 }

type srvStream struct{ skip bool }

func (s *srvStream) Push(id ports.Token) (string, error) { return srvPiece(id, s.skip) }
func (s *srvStream) Flush() string                       { return "" }

// srvTemplate renders "[role]: content" lines and the assistant prompt; enable_thinking true opens a think
// block in the prompt, as Qwen3.5's template does.
type srvTemplate struct{}

func (srvTemplate) Render(msgs []ports.ChatMessage, opts ports.ChatOptions) (string, error) {
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

// srvTarget wraps the toy model to count and slow down Forward calls and to count open sessions, so tests
// can see that a cancelled request stops and frees the engine.
type srvTarget struct {
	// model is held, not embedded: an embedded one would promote portfake's ForwardBatch, which refuses the
	// wrapped sessions this target hands out.
	model    *portfake.Model
	delay    time.Duration
	forwards atomic.Int64
	open     atomic.Int64
	opened   atomic.Int64
	// panicOn makes the n-th Forward (1-based, over all sessions) panic; 0 never.
	panicOn int64
}

func (t *srvTarget) NewSession(ctx context.Context, taps []int) (ports.Session, error) {
	s, err := t.model.NewSession(ctx, taps)
	if err != nil {
		return nil, err
	}
	t.open.Add(1)
	t.opened.Add(1)
	return &srvSession{Session: s, t: t}, nil
}

// Info describes the toy model.
func (t *srvTarget) Info() ports.ModelInfo { return t.model.Info() }

// GreedyContinuation is the toy model's greedy continuation (the tests' oracle).
func (t *srvTarget) GreedyContinuation(history []ports.Token, n int) ([]ports.Token, error) {
	return t.model.GreedyContinuation(history, n)
}

type srvSession struct {
	ports.Session
	t      *srvTarget
	closed bool
}

func (s *srvSession) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	n := s.t.forwards.Add(1)
	if s.t.panicOn > 0 && n == s.t.panicOn {
		panic("srvTarget: injected panic")
	}
	if s.t.delay > 0 {
		time.Sleep(s.t.delay)
	}
	return s.Session.Forward(ctx, tokens, opts)
}

func (s *srvSession) Close() error {
	if !s.closed {
		s.closed = true
		s.t.open.Add(-1)
	}
	return s.Session.Close()
}

// srvEngine builds the fake engine: a hybrid toy model (attention + recurrent layers) with EOS, and a
// scripted drafter of block size 4 whose proposals are right for a varying number of slots.
// With noEOS the model never stops by itself (the toy model still produces the EOS id now and then, but it
// is then an ordinary token), so only max_tokens, a stop string or cancellation end a generation.
func srvEngine(ctxLen int, delay time.Duration, noEOS bool) (Engine, *srvTarget) {
	eos := []ports.Token{srvEOS}
	if noEOS {
		eos = nil
	}
	m := portfake.MustNew(portfake.Config{Vocab: srvModelVocab, ContextLength: ctxLen, Seed: 7, EOS: eos})
	t := &srvTarget{model: m, delay: delay}
	d, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 4, TapLayers: []int{0, 1},
		Propose: func(history []ports.Token, bs int) (ports.Proposal, error) {
			// Diverge after 0..3 right guesses depending on the position, so acceptance varies per slot.
			return portfake.MatchThenDiverge(m, len(history)%4)(history, bs)
		}})
	if err != nil {
		panic(err)
	}
	return Engine{Target: t, Drafter: d, Tokenizer: srvTokenizer{}, Template: srvTemplate{},
		EOS: eos, Name: "toy", Created: 1700000000}, t
}

// srvTokens decodes fake-tokenizer text back to ids (for assertions on the toy model's output).
func srvTokens(s string) []ports.Token {
	ids, _ := srvTokenizer{}.Encode(s)
	return slices.Clip(ids)
}
