package pipeline

import (
	"errors"
	"testing"

	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// staged is what decodeAll reads of a target, distributed (*Node) or whole (*mlx.Target).
type staged interface {
	WeightBytes() int64
	Stage() model.Stage
}

// requireMLX skips the test when libmlxc cannot be loaded (CI has none).
func requireMLX(t testing.TB) {
	t.Helper()
	if err := mlx.Available(); err != nil {
		t.Skipf("libmlxc not found: set HIGGS_MLX_LIB to libmlxc.so / libmlxc.dylib to run the MLX tests (%v)", err)
	}
}

// batchTolerance is adapters/mlx's tolerance for a batched item against its solo run (MLX's products round
// differently for different row counts).
const batchTolerance = 1e-4

// readTaps reads MLX taps as rows.
func readTaps(tp ports.Taps) ([][]float32, error) {
	m, ok := tp.(*mlx.Taps)
	if !ok {
		return nil, errors.New("not mlx taps")
	}
	data, rows, width, err := m.Read()
	if err != nil {
		return nil, err
	}
	out := make([][]float32, rows)
	for r := range out {
		out[r] = data[r*width : (r+1)*width]
	}
	return out, nil
}
