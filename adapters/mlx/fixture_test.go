package mlx

import (
	"testing"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// requireMLX skips the test when libmlxc cannot be loaded (CI has none).
func requireMLX(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("libmlxc not found: set HIGGS_MLX_LIB to libmlxc.so / libmlxc.dylib to run the MLX tests (%v)", err)
	}
}

// fixture is a tiny random checkpoint written by adapters/synth (the same writer the CPU drafter tests use),
// optionally re-stored with every Linear MLX affine-quantized.
type fixture struct {
	spec  synth.TargetSpec
	quant *quant.Spec
}

func writeFixture(t testing.TB, f fixture) string {
	t.Helper()
	dir := testmodel.Synth(t, f.spec)
	if f.quant != nil {
		testmodel.Quantize(t, dir, *f.quant)
	}
	return dir
}
