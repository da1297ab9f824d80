package sampling

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func softmax64(z []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range z {
		m = math.Max(m, v)
	}
	out := make([]float64, len(z))
	var s float64
	for i, v := range z {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

func TestArgmaxTiesLowestID(t *testing.T) {
	assert.Equal(t, ports.Token(1), Argmax([]float32{0, 3, 3, 1}))
	assert.Equal(t, ports.NoToken, Argmax(nil))
	assert.Equal(t, ports.Token(2), Argmax([]float32{float32(math.NaN()), -1, 0}))
}

func TestTransforms(t *testing.T) {
	logits := []float32{1, 2, 3, 4, 0, 4}
	full := softmax64([]float64{0.5, 1, 1.5, 2, 0, 2})
	tests := []struct {
		name string
		p    ports.SamplingParams
		want map[ports.Token]float64
	}{
		{"greedy", ports.SamplingParams{}, map[ports.Token]float64{3: 1}},
		{"temperature", ports.SamplingParams{Temperature: 2}, map[ports.Token]float64{0: full[0], 1: full[1], 2: full[2], 3: full[3], 4: full[4], 5: full[5]}},
		{"topk ties lowest id", ports.SamplingParams{Temperature: 1, TopK: 1}, map[ports.Token]float64{3: 1}},
		{"topk 3", ports.SamplingParams{Temperature: 1, TopK: 3}, func() map[ports.Token]float64 {
			p := softmax64([]float64{3, 4, 4})
			return map[ports.Token]float64{2: p[0], 3: p[1], 5: p[2]}
		}()},
		{"topp", ports.SamplingParams{Temperature: 1, TopP: 0.5}, map[ports.Token]float64{3: 0.5, 5: 0.5}},
		{"minp", ports.SamplingParams{Temperature: 1, MinP: 0.3}, func() map[ports.Token]float64 {
			p := softmax64([]float64{3, 4, 4})
			return map[ports.Token]float64{2: p[0], 3: p[1], 5: p[2]}
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := New(logits, tt.p)
			require.NoError(t, err)
			var total float64
			for tok := range ports.Token(len(logits)) {
				assert.InDelta(t, tt.want[tok], d.Prob(tok), 1e-12, "token %d", tok)
				total += d.Prob(tok)
			}
			assert.InDelta(t, 1, total, 1e-12)
		})
	}
}

func TestSampleInverseCDFAndExclude(t *testing.T) {
	d, err := New([]float32{0, 0, 0, 0}, ports.SamplingParams{Temperature: 1})
	require.NoError(t, err)
	assert.Equal(t, ports.Token(0), d.Sample(0, ports.NoToken))
	assert.Equal(t, ports.Token(1), d.Sample(0.3, ports.NoToken))
	assert.Equal(t, ports.Token(3), d.Sample(0.999999, ports.NoToken))
	// Excluding token 0 leaves 1..3 at 1/3 each.
	assert.Equal(t, ports.Token(1), d.Sample(0, 0))
	assert.Equal(t, ports.Token(2), d.Sample(0.5, 0))
	assert.Equal(t, ports.NoToken, PointMass(7).Sample(0.5, 7))
	assert.Equal(t, ports.Token(7), PointMass(7).Sample(0.5, ports.NoToken))
}

func TestSampleFrequencies(t *testing.T) {
	d, err := New([]float32{0, 1, 2}, ports.SamplingParams{Temperature: 1})
	require.NoError(t, err)
	const n = 10000
	counts := map[ports.Token]int{}
	for i := range n {
		counts[d.Sample((float64(i)+0.5)/n, ports.NoToken)]++
	}
	for tok := range ports.Token(3) {
		assert.InDelta(t, d.Prob(tok), float64(counts[tok])/n, 2.0/n)
	}
}

func TestBadInput(t *testing.T) {
	_, err := New([]float32{1}, ports.SamplingParams{Temperature: -1})
	assert.Error(t, err)
	_, err = New([]float32{float32(math.Inf(-1))}, ports.SamplingParams{Temperature: 1})
	assert.Error(t, err)
	_, err = New(nil, ports.SamplingParams{})
	assert.Error(t, err)
}

func FuzzNew(f *testing.F) {
	f.Add(float32(1), float32(2), float32(-3), 0.7, 2, 0.9, 0.05, 0.5)
	f.Fuzz(func(t *testing.T, a, b, c float32, temp float64, k int, p, mp, u float64) {
		d, err := New([]float32{a, b, c}, ports.SamplingParams{Temperature: temp, TopK: k, TopP: p, MinP: mp})
		if err != nil {
			return
		}
		var total float64
		for tok := range ports.Token(3) {
			q := d.Prob(tok)
			if q < 0 || q > 1+1e-12 {
				t.Fatalf("prob %v", q)
			}
			total += q
		}
		if math.Abs(total-1) > 1e-9 {
			t.Fatalf("total %v", total)
		}
		if !(u >= 0 && u < 1) {
			return
		}
		if tok := d.Sample(u, ports.NoToken); d.Prob(tok) == 0 {
			t.Fatalf("sampled %d with zero probability", tok)
		}
	})
}

// TestTopKSelectionMatchesFullSort checks the heap selection against sorting every candidate, on rows with
// many ties and infinities where the tie order decides the result.
func TestTopKSelectionMatchesFullSort(t *testing.T) {
	vals := []float64{math.Inf(1), math.Inf(-1), -3, 0, 0.5, 1, 1, 2, 7}
	for seed := range 200 {
		n := 1 + seed%37
		cs := make([]cand, n)
		x := uint32(seed*2654435761 + 1)
		for i := range cs {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			cs[i] = cand{id: i, z: vals[int(x)%len(vals)]}
		}
		want := slices.Clone(cs)
		slices.SortFunc(want, candOrder)
		for k := 1; k < n; k++ {
			got := topK(slices.Clone(cs), k)
			require.Equal(t, want[:k], got, "seed %d k %d", seed, k)
		}
	}
}

// BenchmarkNew measures one row of a Qwen-sized vocabulary with and without top-k (the latter sorts every
// candidate).
func BenchmarkNew(b *testing.B) {
	logits := make([]float32, 151936)
	x := uint32(1)
	for i := range logits {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		logits[i] = float32(x%20000) / 1000
	}
	for _, p := range []ports.SamplingParams{{Temperature: 0.7, TopK: 20, TopP: 0.8}, {Temperature: 0.7, TopP: 0.8}} {
		b.Run(fmt.Sprintf("topk=%d", p.TopK), func(b *testing.B) {
			for b.Loop() {
				if _, err := New(logits, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
