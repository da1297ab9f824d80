// Package portfake holds deterministic fakes of the ports for tests: a toy language model behind
// ports.Target/ports.Session with real, checkable caches (attention KV lists and running-hash recurrent
// state that can be trimmed, snapshotted and tape-replayed), a scripted drafter behind
// ports.Drafter/ports.DraftSession with failure injection and call records, a manual Clock and a seeded Rand.
//
// The toy model's next-token logits after position t are a fixed function of the token at t, the token at
// t−1 read back from the attention cache, and every recurrent layer's running hash, so any rollback mistake
// changes later outputs. Model.Dist computes the same distribution from a plain token history, which is the
// oracle tests compare against.
package portfake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.Target = (*Model)(nil)

// Config configures the toy model. The zero value of every field means its default.
type Config struct {
	// Vocab is the vocabulary size (default 32).
	Vocab int
	// ContextLength is the maximum number of positions a session may hold (default 4096).
	ContextLength int
	// Layers are the layer kinds (default attention, recurrent, attention, recurrent).
	Layers []ports.LayerKind
	// Tape makes sessions implement ports.TapeReplayer (the session type is then *TapeSession).
	Tape bool
	// DropTapes makes Forward ignore RecordTape even when Tape is set, like a backend that implements
	// ReplayTape but cannot record every block.
	DropTapes bool
	// Seed selects one of many toy models.
	Seed uint64
	// Sharpness scales the logits (default 4): larger means more peaked distributions.
	Sharpness float64
	// TapWidth is the number of features per tap layer and position (default 4).
	TapWidth int
	// EOS lists stop ids reported in ModelInfo.
	EOS []ports.Token
	// Clock, when set, is advanced by the simulated costs below on every call.
	Clock *Clock
	// ForwardCost, SnapshotCost, RestoreCost and ReplayCost are simulated durations; nil means none.
	ForwardCost  func(tokens int) time.Duration
	SnapshotCost time.Duration
	RestoreCost  time.Duration
	ReplayCost   func(steps int) time.Duration
	// Memory is what SessionBytes charges a session (ports.MemoryPricer); zero: nothing.
	Memory Price
}

// Model is the toy target model. Safe for concurrent use (it is immutable).
type Model struct {
	cfg Config
}

// New validates cfg, fills defaults and returns the model.
func New(cfg Config) (*Model, error) {
	if cfg.Vocab == 0 {
		cfg.Vocab = 32
	}
	if cfg.ContextLength == 0 {
		cfg.ContextLength = 4096
	}
	if cfg.Layers == nil {
		cfg.Layers = []ports.LayerKind{ports.LayerAttention, ports.LayerRecurrent, ports.LayerAttention, ports.LayerRecurrent}
	}
	if cfg.Sharpness == 0 {
		cfg.Sharpness = 4
	}
	if cfg.TapWidth == 0 {
		cfg.TapWidth = 4
	}
	var errs []error
	if cfg.Vocab < 2 {
		errs = append(errs, fmt.Errorf("vocab %d must be ≥ 2", cfg.Vocab))
	}
	if cfg.ContextLength < 1 {
		errs = append(errs, fmt.Errorf("context length %d must be ≥ 1", cfg.ContextLength))
	}
	if len(cfg.Layers) == 0 {
		errs = append(errs, errors.New("no layers"))
	}
	for i, k := range cfg.Layers {
		if k != ports.LayerAttention && k != ports.LayerRecurrent {
			errs = append(errs, fmt.Errorf("layer %d: unknown kind %d", i, int(k)))
		}
	}
	if cfg.Sharpness < 0 || cfg.TapWidth < 1 {
		errs = append(errs, fmt.Errorf("sharpness %v must be ≥ 0 and tap width %d ≥ 1", cfg.Sharpness, cfg.TapWidth))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("portfake model: %w", err)
	}
	cfg.Layers = slices.Clone(cfg.Layers)
	cfg.EOS = slices.Clone(cfg.EOS)
	return &Model{cfg: cfg}, nil
}

// MustNew is New for tests with a known-good configuration; it panics on error.
func MustNew(cfg Config) *Model {
	m, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return m
}

// Info describes the model.
func (m *Model) Info() ports.ModelInfo {
	return ports.ModelInfo{
		Name:          "portfake",
		Architecture:  "portfake",
		VocabSize:     m.cfg.Vocab,
		HiddenSize:    m.cfg.TapWidth,
		ContextLength: m.cfg.ContextLength,
		LayerKinds:    slices.Clone(m.cfg.Layers),
		EOSTokens:     slices.Clone(m.cfg.EOS),
	}
}

// NewSession opens an empty session tapping tapLayers (each in [0, len(Layers))).
func (m *Model) NewSession(ctx context.Context, tapLayers []int) (ports.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, l := range tapLayers {
		if l < 0 || l >= len(m.cfg.Layers) {
			return nil, fmt.Errorf("tap layer %d outside [0, %d)", l, len(m.cfg.Layers))
		}
	}
	s := &Session{m: m, taps: slices.Clone(tapLayers)}
	for _, k := range m.cfg.Layers {
		if k == ports.LayerAttention {
			s.kv = append(s.kv, nil)
		} else {
			s.rec = append(s.rec, recState{h: m.cfg.Seed})
		}
	}
	if m.cfg.Tape {
		return &TapeSession{Session: s}, nil
	}
	return s, nil
}

// recStep is one recurrent layer's state update.
func (m *Model) recStep(h uint64, layer int, tok ports.Token, pos int) uint64 {
	return hash(h, uint64(layer), uint64(tok), uint64(pos))
}

// key is what the next-token logits after a position depend on.
func (m *Model) key(tok, prev ports.Token, rec []uint64) uint64 {
	k := hash(m.cfg.Seed, uint64(tok))
	if m.attentionLayers() > 0 {
		k = hash(k, uint64(prev)+1)
	}
	for _, h := range rec {
		k = hash(k, h)
	}
	return k
}

func (m *Model) attentionLayers() int {
	n := 0
	for _, k := range m.cfg.Layers {
		if k == ports.LayerAttention {
			n++
		}
	}
	return n
}

func (m *Model) logits(key uint64) []float64 {
	l := make([]float64, m.cfg.Vocab)
	for j := range l {
		l[j] = m.cfg.Sharpness * unit(hash(key, uint64(j)))
	}
	return l
}

// Logits returns the next-token logits after history (the whole sequence so far, at least one token),
// computed from scratch: the oracle for sessions.
func (m *Model) Logits(history []ports.Token) ([]float64, error) {
	key, err := m.historyKey(history)
	if err != nil {
		return nil, err
	}
	return m.logits(key), nil
}

var _ ports.Embedder = (*Model)(nil)

// LastHidden is the toy's final hidden state of the last position (ports.Embedder): TapWidth values drawn
// from the key its next-token logits depend on, so it changes with the last token, the one before it and
// every recurrent layer's hash of the whole sequence.
func (m *Model) LastHidden(ctx context.Context, tokens []ports.Token) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("portfake last hidden: %w", err)
	}
	if len(tokens) > m.cfg.ContextLength {
		return nil, fmt.Errorf("portfake last hidden of %d tokens (context %d): %w", len(tokens), m.cfg.ContextLength, ports.ErrContextFull)
	}
	key, err := m.historyKey(tokens)
	if err != nil {
		return nil, fmt.Errorf("portfake last hidden: %w", err)
	}
	out := make([]float32, m.cfg.TapWidth)
	// Layer index len(Layers) is no tap layer's: the hidden state differs from every tap.
	m.tapRow(len(m.cfg.Layers), key, out)
	return out, nil
}

// historyKey is the key the next-token logits after history depend on.
func (m *Model) historyKey(history []ports.Token) (uint64, error) {
	if len(history) == 0 {
		return 0, errors.New("empty history")
	}
	var rec []uint64
	for _, k := range m.cfg.Layers {
		if k == ports.LayerRecurrent {
			rec = append(rec, m.cfg.Seed)
		}
	}
	for pos, tok := range history {
		if tok < 0 || int(tok) >= m.cfg.Vocab {
			return 0, fmt.Errorf("token %d at position %d outside vocabulary %d", tok, pos, m.cfg.Vocab)
		}
		for i := range rec {
			rec[i] = m.recStep(rec[i], i, tok, pos)
		}
	}
	prev := ports.NoToken
	if len(history) > 1 {
		prev = history[len(history)-2]
	}
	return m.key(history[len(history)-1], prev, rec), nil
}

// Dist returns the next-token distribution after history under sampling params s (greedy: a point mass).
func (m *Model) Dist(history []ports.Token, s ports.SamplingParams) (*Dist, error) {
	l, err := m.Logits(history)
	if err != nil {
		return nil, err
	}
	return transform(l, s), nil
}

// Greedy returns the argmax next token after history.
func (m *Model) Greedy(history []ports.Token) (ports.Token, error) {
	d, err := m.Dist(history, ports.SamplingParams{})
	if err != nil {
		return ports.NoToken, err
	}
	return d.Argmax(), nil
}

// GreedyContinuation returns the n greedy tokens following history.
func (m *Model) GreedyContinuation(history []ports.Token, n int) ([]ports.Token, error) {
	h := slices.Clone(history)
	for range n {
		t, err := m.Greedy(h)
		if err != nil {
			return nil, err
		}
		h = append(h, t)
	}
	return h[len(history):], nil
}

// tapRow computes the tap features of one position at one tap layer.
func (m *Model) tapRow(layer int, key uint64, out []float32) {
	for i := range out {
		out[i] = float32(unit(hash(key, uint64(layer), uint64(i))))*2 - 1
	}
}

func (m *Model) advance(d time.Duration) {
	if m.cfg.Clock != nil {
		m.cfg.Clock.Advance(d)
	}
}
