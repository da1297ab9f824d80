package models

import (
	"context"
	"fmt"
	"math"

	"github.com/higgs-go/higgs/ports"
)

// probeFinite runs one token through a fresh session of t and refuses a model whose logits are not all
// finite: weights full of NaN (a corrupt download, a bad conversion) otherwise load and fail every request
// with a 500. One decoding step touches every dense matrix, the routed experts of that token and its
// embedding row, so it costs one token's time; a NaN in an expert no token reached stays unseen until it is.
func probeFinite(ctx context.Context, t ports.Target) error {
	sess, err := t.NewSession(ctx, nil)
	if err != nil {
		return fmt.Errorf("probe forward: open session: %w", err)
	}
	defer sess.Close()
	bad := func(err error) error {
		return fmt.Errorf("the model's weights give no finite output for one token (%w): the checkpoint is corrupt (NaN or Inf weights?)", err)
	}
	fr, err := sess.Forward(ctx, []ports.Token{0}, ports.ForwardOptions{Rows: 1, Logits: true})
	if err != nil {
		return bad(err)
	}
	n := 0
	for _, v := range fr.Logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			n++
		}
	}
	if n > 0 {
		return bad(fmt.Errorf("%d of %d logits are NaN or infinite", n, len(fr.Logits)))
	}
	return nil
}
