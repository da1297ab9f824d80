package model

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// topRef is TopCandidates by sorting the whole row: first, then the others by logit (descending), ids
// ascending on ties.
func topRef(row []float32, first ports.Token, k int) []ports.Token {
	ids := make([]ports.Token, 0, len(row))
	for id := range row {
		if ports.Token(id) != first {
			ids = append(ids, ports.Token(id))
		}
	}
	slices.SortStableFunc(ids, func(a, b ports.Token) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	return append([]ports.Token{first}, ids[:min(k, len(row))-1]...)
}

func TestTopCandidates(t *testing.T) {
	logits := []float32{
		0, 2, 1, 2, -1, // ties between 1 and 3: the lower id first
		5, 5, 5, 5, 5, // all equal
		-3, 4, 0.5, math.Float32frombits(0xff800000), 1, // a -Inf logit
	}
	tests := []struct {
		name  string
		first []ports.Token
		k     int
		want  [][]ports.Token
	}{
		{"argmax first", []ports.Token{1, 0, 1}, 3, [][]ports.Token{{1, 3, 2}, {0, 1, 2}, {1, 4, 2}}},
		{"selector's pick first", []ports.Token{4, 3, 3}, 3, [][]ports.Token{{4, 1, 3}, {3, 0, 1}, {3, 1, 4}}},
		{"k 1", []ports.Token{2, 2, 0}, 1, [][]ports.Token{{2}, {2}, {0}}},
		{"k above the vocabulary", []ports.Token{0, 4, 3}, 9, [][]ports.Token{{0, 1, 3, 2, 4}, {4, 0, 1, 2, 3}, {3, 1, 4, 2, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TopCandidates(logits, 5, tc.first, tc.k)
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for r, want := range tc.want {
				row := logits[r*5 : (r+1)*5]
				assert.Equal(t, topRef(row, tc.first[r], tc.k), want, "reference, row %d", r)
				toks := make([]ports.Token, len(got[r]))
				for i, c := range got[r] {
					toks[i] = c.Token
				}
				assert.Equal(t, want, toks, "row %d", r)
				// The probabilities are softmax's in float64 and never rise after the first entry.
				m := float64(slices.Max(row))
				var sum float64
				for _, l := range row {
					sum += math.Exp(float64(l) - m)
				}
				for i, c := range got[r] {
					assert.Equal(t, math.Exp(float64(row[c.Token])-m)/sum, c.Prob, "row %d entry %d", r, i)
					if i > 1 {
						assert.LessOrEqual(t, c.Prob, got[r][i-1].Prob)
					}
				}
			}
		})
	}
}

func TestTopCandidatesRefusals(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(-1))
	for name, c := range map[string]struct {
		logits []float32
		first  []ports.Token
		k      int
	}{
		"k 0":            {[]float32{1, 2}, []ports.Token{0}, 0},
		"short logits":   {[]float32{1}, []ports.Token{0}, 1},
		"token outside":  {[]float32{1, 2}, []ports.Token{2}, 1},
		"negative token": {[]float32{1, 2}, []ports.Token{-1}, 1},
		"NaN logit":      {[]float32{1, nan}, []ports.Token{0}, 2},
		"all -Inf":       {[]float32{inf, inf}, []ports.Token{0}, 2},
	} {
		_, err := TopCandidates(c.logits, 2, c.first, c.k)
		assert.Error(t, err, name)
	}
}

// FuzzTopCandidates: on any finite logits the result is the sorting reference's, with probabilities that
// sum to at most 1.
func FuzzTopCandidates(f *testing.F) {
	f.Add([]byte{1, 2, 3, 3, 0, 9}, uint8(2), uint8(3))
	f.Add([]byte{7, 7, 7, 7}, uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, first, k uint8) {
		if len(b) == 0 {
			return
		}
		row := make([]float32, len(b))
		for i, v := range b {
			row[i] = float32(int8(v)) / 8
		}
		tok := ports.Token(int(first) % len(row))
		got, err := TopCandidates(row, len(row), []ports.Token{tok}, int(k%12)+1)
		require.NoError(t, err)
		want := topRef(row, tok, int(k%12)+1)
		require.Len(t, got[0], len(want))
		var sum float64
		for i, c := range got[0] {
			require.Equal(t, want[i], c.Token)
			sum += c.Prob
		}
		require.LessOrEqual(t, sum, 1+1e-12)
	})
}

func TestRowMax(t *testing.T) {
	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	nan := float32(math.NaN())
	for _, c := range []struct {
		name string
		row  []float32
		want float64
		err  string
	}{
		{"plain", []float32{-3, 2.5, 1, 2.5, -inf}, 2.5, ""},
		{"negative", []float32{-7, -2, -9}, -2, ""},
		{"one", []float32{0.25}, 0.25, ""},
		{"signed zeros", []float32{negZero, 0, negZero}, 0, ""},
		{"negative zero", []float32{-1, negZero}, math.Copysign(0, -1), ""},
		{"nan first", []float32{nan, 1, 2}, 0, "token 0 is NaN"},
		{"nan after the max", []float32{5, 1, nan}, 0, "token 2 is NaN"},
		{"nan after +inf", []float32{inf, nan}, 0, "token 1 is NaN"},
		{"all -inf", []float32{-inf, -inf}, 0, "every logit is -Inf"},
		{"+inf", []float32{1, inf, 2}, 0, "+Inf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := RowMax(c.row)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, m)
			assert.Equal(t, math.Signbit(c.want), math.Signbit(m), "the sign of a zero")
		})
	}
}
