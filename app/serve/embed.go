package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/ports"
)

var _ ports.TextEmbedder = (*Serve)(nil)

// Limits of one embeddings request.
const (
	// MaxEmbedInputs is the most inputs one request may hold (OpenAI's own limit).
	MaxEmbedInputs = 2048
	// MaxEmbedTokens is the most tokens one request's inputs may hold together, the end-of-text tokens
	// appended included: the request holds one queue slot while it runs them one after the other.
	MaxEmbedTokens = 65536
	// MinEmbedDimensions is the smallest dimensions a Matryoshka model accepts (Qwen3-Embedding's smallest
	// trained width), or its hidden size where that is smaller.
	MinEmbedDimensions = 32
)

// EndOfText is the token appended to every input, as Qwen3-Embedding's tokenizer and its published usage
// append it (the pooled position is this token's), unless the input already ends with it.
const EndOfText = "<|endoftext|>"

// Embed returns the L2-normalised last-token embedding of each input (ports.TextEmbedder): texts are
// tokenized as the tokenizer encodes them (special-token spellings are recognised, as transformers does),
// token inputs are taken as given; each gets EndOfText appended unless it already ends with it. The request
// waits in the generations' queue (one slot, the memory of its longest input) and runs its inputs one after
// the other, each in a forward of its own from an empty state: nothing is shared with any other request, so
// neither the prefix cache nor the batch scheduler is used.
func (s *Serve) Embed(ctx context.Context, req ports.EmbedRequest) (res ports.EmbedResult, err error) {
	id := req.ID
	if id == "" {
		id = s.requestID()
	}
	l := s.engine.Load()
	start := s.clock.Now()
	defer func() { s.logEmbed(ctx, id, req, l, res, err, start) }()
	if l, err = s.engineFor(req.Model, "embeddings"); err != nil {
		return ports.EmbedResult{}, err
	}
	emb, ok := l.Target.(ports.Embedder)
	switch {
	case !ok:
		return ports.EmbedResult{}, fmt.Errorf("embeddings: the model %q runs on a backend that cannot return hidden states: %w", l.name, errors.ErrUnsupported)
	case l.PoolingErr != nil:
		return ports.EmbedResult{}, fmt.Errorf("embeddings: the model %q: %v: %w", l.name, l.PoolingErr, errors.ErrUnsupported)
	case l.Pooling.Mode != "" && l.Pooling.Mode != models.PoolingLastToken:
		return ports.EmbedResult{}, fmt.Errorf("embeddings: the model %q pools its embeddings by %q (its %s); higgs pools the last token only: %w",
			l.name, l.Pooling.Mode, models.PoolingFile, errors.ErrUnsupported)
	}
	seqs, dims, err := s.embedInputs(l, req)
	if err != nil {
		return ports.EmbedResult{}, err
	}
	need, longest := int64(0), 0
	for _, q := range seqs {
		need = max(need, l.footprint.requestBytes(len(q), 0, 1, len(q)))
		longest = max(longest, len(q))
		res.PromptTokens += len(q)
	}
	if room := s.requestRoom(l); need > room {
		// As a generation whose prompt can never fit: the client's to fix, not a wait that cannot end.
		return ports.EmbedResult{}, requestErr("input", fmt.Errorf("the longest input's %d tokens need %d bytes: %w of %d bytes (--memory-budget-bytes); shorten the inputs or raise --memory-budget-bytes",
			longest, need, batch.ErrOverBudget, room))
	}
	release, err := s.admit(ctx, l, need)
	if err != nil {
		return ports.EmbedResult{}, fmt.Errorf("embeddings: %w", err)
	}
	defer release()
	res.Model = l.name
	res.Embeddings = make([][]float32, len(seqs))
	for i, q := range seqs {
		h, err := emb.LastHidden(ctx, q)
		if err != nil {
			return ports.EmbedResult{}, fmt.Errorf("embeddings: input %d: %w", i, err)
		}
		res.Embeddings[i] = Normalize(h, dims)
	}
	return res, nil
}

// embedInputs checks req against l and returns the token sequences to run and the embedding width.
func (s *Serve) embedInputs(l *loaded, req ports.EmbedRequest) ([][]ports.Token, int, error) {
	var errs []error
	hidden := l.info.HiddenSize
	dims := hidden
	if d := req.Dimensions; d != 0 {
		lo := min(MinEmbedDimensions, hidden)
		switch {
		case l.Pooling.Mode != models.PoolingLastToken:
			errs = append(errs, invalid("dimensions", "the model %q was not trained for shortened embeddings (Matryoshka); dimensions is accepted only by models that ship %s with last-token pooling, such as Qwen3-Embedding", l.name, models.PoolingFile))
		case d < lo || d > hidden:
			errs = append(errs, invalid("dimensions", "dimensions %d is outside [%d, %d] for the model %q", d, lo, hidden, l.name))
		default:
			dims = d
		}
	}
	switch n := len(req.Inputs); {
	case n == 0:
		errs = append(errs, invalid("input", "input must not be empty"))
	case n > MaxEmbedInputs:
		errs = append(errs, invalid("input", "input holds %d items; at most %d per request", n, MaxEmbedInputs))
	}
	if len(errs) > 0 {
		return nil, 0, errors.Join(errs...)
	}
	eot, hasEOT := l.Tokenizer.TokenID(EndOfText)
	vocab := l.info.VocabSize
	ctxLen := l.info.ContextLength
	seqs := make([][]ports.Token, len(req.Inputs))
	total := 0
	for i, in := range req.Inputs {
		var ids []ports.Token
		if in.Tokens != nil {
			ids = append([]ports.Token(nil), in.Tokens...)
			for j, id := range ids {
				if id < 0 || int(id) >= vocab {
					return nil, 0, invalid("input", "input[%d][%d] = %d is outside this model's vocabulary of %d", i, j, id, vocab)
				}
			}
		} else {
			enc, err := l.Tokenizer.Encode(in.Text)
			if err != nil {
				return nil, 0, invalid("input", "input[%d]: tokenize: %v", i, err)
			}
			ids = enc
		}
		if len(ids) == 0 {
			return nil, 0, invalid("input", "input[%d] is empty", i)
		}
		if hasEOT && ids[len(ids)-1] != eot {
			ids = append(ids, eot)
		}
		if ctxLen > 0 && len(ids) > ctxLen {
			return nil, 0, invalid("input", "input[%d] holds %d tokens (with %s); the model's context holds %d", i, len(ids), EndOfText, ctxLen)
		}
		total += len(ids)
		if total > MaxEmbedTokens {
			return nil, 0, invalid("input", "the inputs hold more than %d tokens together; split the request", MaxEmbedTokens)
		}
		seqs[i] = ids
	}
	return seqs, dims, nil
}

// Normalize returns the first dims values of h divided by their L2 norm (summed in float64), as
// torch.nn.functional.normalize does after Qwen3-Embedding's last-token pooling and its users' Matryoshka
// truncation; a zero row stays zero (the norm is floored at 1e-12, as there).
func Normalize(h []float32, dims int) []float32 {
	h = h[:dims]
	var ss float64
	for _, v := range h {
		ss += float64(v) * float64(v)
	}
	n := max(math.Sqrt(ss), 1e-12)
	out := make([]float32, len(h))
	for i, v := range h {
		out[i] = float32(float64(v) / n)
	}
	return out
}

// logEmbed writes an embeddings request's one info-level line, as requestLog does a generation's.
func (s *Serve) logEmbed(ctx context.Context, id string, req ports.EmbedRequest, l *loaded, res ports.EmbedResult, err error, start time.Time) {
	ev := s.log.Info()
	if !ev.Enabled() {
		return
	}
	model := req.Model
	if model == "" && l != nil {
		model = l.name
	}
	finish := "embedded"
	if err != nil {
		finish = finishOf(ctx, ports.GenerateResult{}, err)
	}
	ev.Str("id", id).Str("model", model).Str("kind", "embeddings").Int("inputs", len(req.Inputs)).
		Int("prompt_tokens", res.PromptTokens).Str("finish", finish).Dur("duration", s.clock.Now().Sub(start))
	if err != nil && ctx.Err() == nil {
		ev.Str("error", err.Error())
	}
	ev.Msg("request")
}
