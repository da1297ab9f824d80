package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

func requireMLX(t testing.TB) *mlxc.Runtime {
	t.Helper()
	rt, err := mlxc.Open()
	if err != nil {
		t.Skipf("libmlxc not found: set HIGGS_MLX_LIB to libmlxc.so / libmlxc.dylib to run the MLX tests (%v)", err)
	}
	return rt
}

// qwenVocab is Qwen3's vocabulary (151,936 ids): the size at which reading rows back costs the most.
const qwenVocab = 151936

// topRows is a set of logit rows for Top, built on the host from a seed.
type topRows struct {
	vocab  int
	logits []float32 // rows × vocab
	first  []ports.Token
	k      int
	dt     mlxc.Dtype // the dtype the rows have on the device (their values are rounded to it first)
}

// gaussRows returns rows of N(0, 3²) logits over vocab from seed, each row's drafted token its argmax (the
// first maximum, as DFlash drafts).
func gaussRows(rows, vocab int, seed uint64) ([]float32, []ports.Token) {
	rng := rand.New(rand.NewPCG(seed, 7))
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(3 * rng.NormFloat64())
	}
	return logits, argmaxes(logits, vocab)
}

func argmaxes(logits []float32, vocab int) []ports.Token {
	first := make([]ports.Token, len(logits)/vocab)
	for r := range first {
		row := logits[r*vocab : (r+1)*vocab]
		for id, l := range row {
			if l > row[first[r]] {
				first[r] = ports.Token(id)
			}
		}
	}
	return first
}

// bf16 rounds v to bfloat16 (to nearest, ties to even), as MLX's cast does.
func bf16(v float32) float32 {
	b := math.Float32bits(v)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// The device's candidates are model.TopCandidates's on a vocabulary of 150k: the same tokens in the same
// order (ties to the lower id, whether the tie falls inside the read-back margin, across it, or spans the
// whole row), probabilities within a relative 1e-5 of the float64 reference; rows without a distribution
// are refused with the reference's error, and a k whose margin reaches the vocabulary ranks the rows read
// whole.
func TestTopMatchesHost(t *testing.T) {
	rt := requireMLX(t)
	const V, R = qwenVocab, 6
	cases := map[string]func() topRows{
		"gaussian": func() topRows {
			l, f := gaussRows(R, V, 1)
			return topRows{vocab: V, logits: l, first: f, k: 8, dt: mlxc.Float32}
		},
		"k 1": func() topRows {
			l, f := gaussRows(R, V, 2)
			return topRows{vocab: V, logits: l, first: f, k: 1, dt: mlxc.Float32}
		},
		"drafted outside the top k": func() topRows { // DFlash2's selector may pick a less probable token
			l, _ := gaussRows(R, V, 3)
			f := []ports.Token{0, 151935, 77, 5000, 12, 99999}
			return topRows{vocab: V, logits: l, first: f, k: 4, dt: mlxc.Float32}
		},
		"ties inside the margin": func() topRows {
			l, _ := gaussRows(R, V, 4)
			for r := range R { // ten equal logits at the top, ids spread over the row, high ids first
				for j := range 10 {
					l[r*V+V-1-j*9000] = 20
				}
			}
			return topRows{vocab: V, logits: l, first: argmaxes(l, V), k: 8, dt: mlxc.Float32}
		},
		"a tie run across the margin": func() topRows {
			l, _ := gaussRows(R, V, 5)
			for r := range R { // two above, then 3·TieMargin equal: the k-th place ties the m-th largest
				l[r*V+100], l[r*V+60000] = 30, 25
				for j := range 3 * TieMargin {
					l[r*V+V-1-j*2000] = 20
				}
			}
			return topRows{vocab: V, logits: l, first: argmaxes(l, V), k: 6, dt: mlxc.Float32}
		},
		"uniform rows": func() topRows {
			l := make([]float32, R*V)
			f := []ports.Token{0, 1, 151935, 3, 4, 70000}
			return topRows{vocab: V, logits: l, first: f, k: 5, dt: mlxc.Float32}
		},
		"-Inf masked ids": func() topRows {
			l, _ := gaussRows(R, V, 6)
			for i := range l {
				if i%3 != 0 {
					l[i] = float32(math.Inf(-1))
				}
			}
			return topRows{vocab: V, logits: l, first: argmaxes(l, V), k: 8, dt: mlxc.Float32}
		},
		"bfloat16 logits": func() topRows { // rounded to 8 bits of mantissa, equal logits are common
			l, _ := gaussRows(R, V, 7)
			for i := range l {
				l[i] = bf16(l[i])
			}
			return topRows{vocab: V, logits: l, first: argmaxes(l, V), k: 8, dt: mlxc.BFloat16}
		},
		"whole blocks": func() topRows { // no tail past the last block
			l, f := gaussRows(R, 1<<17, 12)
			return topRows{vocab: 1 << 17, logits: l, first: f, k: 8, dt: mlxc.Float32}
		},
		"fewer blocks than candidates": func() topRows { // one selection over the row, ties included
			const v = 3000
			l, _ := gaussRows(R, v, 13)
			for r := range R {
				for j := range 12 {
					l[r*v+v-1-j*200] = 15
				}
			}
			return topRows{vocab: v, logits: l, first: argmaxes(l, v), k: 8, dt: mlxc.Float32}
		},
		"few distinct logits": func() topRows { // thousands tie at the top: every row read whole
			rng := rand.New(rand.NewPCG(14, 7))
			l := make([]float32, R*V)
			for i := range l {
				l[i] = float32(rng.IntN(40))
			}
			return topRows{vocab: V, logits: l, first: argmaxes(l, V), k: 4, dt: mlxc.Float32}
		},
		"margin past a small vocabulary": func() topRows {
			l, f := gaussRows(3, 20, 8)
			return topRows{vocab: 20, logits: l, first: f, k: 8, dt: mlxc.Float32}
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			in := mk()
			want, err := model.TopCandidates(in.logits, in.vocab, in.first, in.k)
			require.NoError(t, err)
			got, err := runTop(t, rt, in)
			require.NoError(t, err)
			require.Len(t, got, len(want))
			for r := range want {
				require.Len(t, got[r], len(want[r]), "row %d", r)
				for j, c := range want[r] {
					assert.Equal(t, c.Token, got[r][j].Token, "row %d rank %d", r, j)
					assert.InEpsilon(t, c.Prob, got[r][j].Prob, 1e-5, "row %d rank %d", r, j)
				}
			}
		})
	}
	refusals := map[string]func(row []float32){
		"NaN":      func(row []float32) { row[4242] = float32(math.NaN()) },
		"all -Inf": func(row []float32) { fill(row, float32(math.Inf(-1))) },
		"+Inf":     func(row []float32) { row[90000] = float32(math.Inf(1)) },
		"NaN and +Inf": func(row []float32) {
			row[7], row[8] = float32(math.Inf(1)), float32(math.NaN())
		},
	}
	for name, spoil := range refusals {
		t.Run("refuses "+name, func(t *testing.T) {
			l, f := gaussRows(R, V, 9)
			spoil(l[3*V : 4*V])
			_, want := model.TopCandidates(l, V, f, 4)
			require.Error(t, want)
			_, err := runTop(t, rt, topRows{vocab: V, logits: l, first: f, k: 4, dt: mlxc.Float32})
			require.Error(t, err)
			assert.Equal(t, want.Error(), err.Error())
		})
	}
	t.Run("refuses bad input", func(t *testing.T) {
		l, f := gaussRows(2, 100, 10)
		_, err := runTop(t, rt, topRows{vocab: 100, logits: l, first: f, k: 0, dt: mlxc.Float32})
		assert.ErrorContains(t, err, "top-k 0 must be ≥ 1")
		_, err = runTop(t, rt, topRows{vocab: 100, logits: l, first: []ports.Token{1, 100}, k: 2, dt: mlxc.Float32})
		assert.ErrorContains(t, err, "row 1: token 100 outside the vocabulary of 100")
		_, err = runTop(t, rt, topRows{vocab: 100, logits: l, first: f[:1], k: 2, dt: mlxc.Float32})
		assert.ErrorContains(t, err, "1 drafted tokens for 2 logit rows")
	})
}

func fill(row []float32, v float32) {
	for i := range row {
		row[i] = v
	}
}

// runTop uploads in's rows (cast to in.dt) and ranks them with Backend.Top on the MLX thread.
func runTop(t testing.TB, rt *mlxc.Runtime, in topRows) ([][]ports.Candidate, error) {
	t.Helper()
	var got [][]ports.Candidate
	var topErr error
	err := rt.Do(func() error {
		g := graph.New(rt, "top test")
		defer g.Release()
		rows := len(in.logits) / in.vocab
		x := graph.UploadF32(g, in.logits, rows, in.vocab)
		if in.dt != mlxc.Float32 {
			x = g.Astype(x, in.dt)
		}
		got, topErr = Backend{G: g, DT: in.dt}.Top(Act{x, rows, in.vocab}, in.first, in.k)
		return g.Err
	})
	require.NoError(t, err)
	return got, topErr
}

// BenchmarkTop ranks 15 slots of a 151,936-id vocabulary for k = 4 (a block of 16, the tree's default
// width): "host" is the path Top replaces (every row read back, ranked and normalised in float64 by
// model.TopCandidates), "device" is Top. Both start from logits already on the device.
func BenchmarkTop(b *testing.B) {
	rt := requireMLX(b)
	const V, R, K = qwenVocab, 15, 4
	logits, first := gaussRows(R, V, 11)
	var x arr
	arena := graph.New(rt, "top bench")
	require.NoError(b, rt.Do(func() error {
		x = graph.UploadF32(arena, logits, R, V)
		arena.Eval(x)
		return arena.Err
	}))
	b.Cleanup(func() { _ = rt.Do(func() error { arena.Release(); return nil }) })
	paths := map[string]func(o Backend) ([][]ports.Candidate, error){
		"host": func(o Backend) ([][]ports.Candidate, error) {
			return model.TopCandidates(o.Host(Act{x, R, V}), V, first, K)
		},
		"device": func(o Backend) ([][]ports.Candidate, error) { return o.Top(Act{x, R, V}, first, K) },
	}
	for _, name := range []string{"host", "device"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				err := rt.Do(func() error {
					g := graph.New(rt, "top bench "+name)
					defer g.Release()
					top, err := paths[name](Backend{G: g, DT: mlxc.Float32})
					if err == nil && len(top) != R {
						b.Fatalf("%d rows ranked, want %d", len(top), R)
					}
					return err
				})
				require.NoError(b, err)
			}
		})
	}
}
