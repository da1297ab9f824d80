package sampling

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.PositionRand = (*Source)(nil)

// Key tags keep the position-keyed numbers and the sequential stream of one seed apart, and name the scheme's
// version: changing how a seed maps to numbers changes every seeded output, so it is a new tag, never an edit.
const (
	tagPosition = 0x7370_6f73_7631 // "posv1"
	tagStream   = 0x7374_7265_7631 // "strv1"
)

// Source is the engine's seeded randomness: ChaCha8 (math/rand/v2) keyed by the seed. Uniform(pos) is the
// first output of ChaCha8 keyed by (seed, pos), a counter-based generator, so the number of a position is a
// pure function of the seed and the position; Float64 is one ChaCha8 stream keyed by the seed alone, for the
// samplers whose draws are sequential (residual rejection sampling). Float64 is not safe for concurrent use;
// Uniform is.
type Source struct {
	seed   uint64
	stream *rand.Rand
}

// NewSource returns the source of seed; the same seed gives the same numbers on every run and machine.
func NewSource(seed uint64) *Source {
	return &Source{seed: seed, stream: rand.New(rand.NewChaCha8(key(seed, tagStream, 0)))}
}

// Float64 returns the next uniform number in [0, 1) of the seed's sequential stream.
func (s *Source) Float64() float64 { return s.stream.Float64() }

// Uniform returns the uniform number in [0, 1) of sequence position pos.
func (s *Source) Uniform(pos int) float64 {
	c := rand.NewChaCha8(key(s.seed, tagPosition, uint64(pos)))
	return float64(c.Uint64()>>11) / (1 << 53)
}

// key packs seed, tag and counter into a ChaCha8 key (little-endian, the last word zero).
func key(seed, tag, counter uint64) [32]byte {
	var k [32]byte
	binary.LittleEndian.PutUint64(k[0:], seed)
	binary.LittleEndian.PutUint64(k[8:], tag)
	binary.LittleEndian.PutUint64(k[16:], counter)
	return k
}
