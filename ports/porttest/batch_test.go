package porttest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
	"github.com/higgs-go/higgs/ports/porttest"
)

// The batched ports' suite on the fakes: hybrid with tapes, hybrid with snapshots only, attention-only and
// recurrent-only toy models, with the scripted drafter.
func TestPortfakeBatch(t *testing.T) {
	for name, cfg := range map[string]portfake.Config{
		"hybrid-tape":     {Tape: true, ContextLength: 64},
		"hybrid-snapshot": {ContextLength: 64},
		"attention-only":  {Layers: []ports.LayerKind{ports.LayerAttention}, ContextLength: 64},
		"recurrent-only":  {Layers: []ports.LayerKind{ports.LayerRecurrent}, Tape: true, ContextLength: 64},
	} {
		t.Run(name, func(t *testing.T) {
			m := portfake.MustNew(cfg)
			d, err := portfake.NewDrafter(portfake.DrafterConfig{BlockSize: 8, Propose: portfake.MatchThenDiverge(m, 2)})
			require.NoError(t, err)
			porttest.BatchSuite{Target: m, Drafter: d, TapLayers: []int{0}, ReadTaps: readFakeTaps, ContextLength: cfg.ContextLength}.Run(t)
		})
	}
}
