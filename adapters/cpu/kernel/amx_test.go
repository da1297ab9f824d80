package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAMXAvailability says which tile path this machine runs, so a run on a CPU without AMX says so.
func TestAMXAvailability(t *testing.T) {
	if !hasAMX {
		t.Skip("no AMX-INT8 tiles on this CPU (or the kernel refused the tile data): the tile kernels are not run here")
	}
	assert.Equal(t, "avx512vnni+amx", FastForm())
	assert.True(t, AMX())
	assert.False(t, SetAMX(false))
	assert.Equal(t, "avx512vnni", FastForm())
	assert.True(t, SetAMX(true))
}

// The kernels read panelArgs by offset (gen_panel.py's, gen_amx.py's and gen_scales.py's tables): every field
// is 8 bytes, in declaration order.
func TestPanelArgsLayout(t *testing.T) {
	var a panelArgs
	offs := []uintptr{unsafe.Offsetof(a.codes), unsafe.Offsetof(a.scales), unsafe.Offsetof(a.biases),
		unsafe.Offsetof(a.npanels), unsafe.Offsetof(a.xp), unsafe.Offsetof(a.chadj), unsafe.Offsetof(a.xst),
		unsafe.Offsetof(a.ngroups), unsafe.Offsetof(a.bpg), unsafe.Offsetof(a.dst), unsafe.Offsetof(a.ldd),
		unsafe.Offsetof(a.cfg), unsafe.Offsetof(a.xa), unsafe.Offsetof(a.wbuf),
		unsafe.Offsetof(a.sform), unsafe.Offsetof(a.bmul), unsafe.Offsetof(a.sstep)}
	for i, o := range offs {
		assert.Equal(t, uintptr(8*i), o, "field %d", i)
	}
}

// LDTILECFG's operand: palette 1, per tile its bytes per row (2 bytes from offset 16) and rows (offset 48).
func TestTileConfig(t *testing.T) {
	c := amxConfig
	assert.Equal(t, byte(1), c[0])
	for s := range 2 {
		assert.Equal(t, []byte{64, 0}, c[16+6*s:18+6*s], "set %d sums", s)
		assert.Equal(t, byte(16), c[48+3*s], "set %d sums' rows", s)
		assert.Equal(t, []byte{64, 0}, c[18+6*s:20+6*s], "set %d inputs", s)
		assert.Equal(t, byte(16), c[49+3*s], "set %d inputs' rows", s)
		assert.Equal(t, []byte{64, 0}, c[20+6*s:22+6*s], "set %d weights", s)
		assert.Equal(t, byte(16), c[50+3*s], "set %d weights' rows", s)
	}
	assert.Zero(t, c[48+6], "tiles 6 and 7 unused")
}

// amxTiles gives every product of amxTileRows rows to the tiles, and one of amxMinRows or more only where its
// weights fill each worker's calls.
func TestAMXTilesPick(t *testing.T) {
	small := &Linear{Out: 1280, In: 640} // the bundled gocoder's MLP: 0.8M weights
	big := &Linear{Out: 3072, In: 1024}  // 3.1M
	for _, c := range []struct {
		rows, threads int
		ls            []*Linear
		want          bool
	}{
		{15, 1, []*Linear{big}, false},
		{16, 2, []*Linear{small}, false},
		{16, 2, []*Linear{small, small}, false}, // a pair: 1.6M over 2 workers
		{16, 1, []*Linear{small, small}, true},
		{16, 2, []*Linear{big}, true},
		{16, 4, []*Linear{big}, false},
		{31, 2, []*Linear{small}, false},
		{amxTileRows, 8, []*Linear{small}, true},
		{128, 2, []*Linear{small}, true},
	} {
		assert.Equal(t, c.want, amxTiles(c.rows, c.ls, c.threads), "rows %d, threads %d, %d products", c.rows, c.threads, len(c.ls))
	}
}

// With the default amxTileRows, a product of 16–31 rows over weights of 1M per worker runs its block of 16 on
// tiles (amxTiles) and gives the Go panel form's bits, padded tail included.
func TestAMXLargeSixteenRows(t *testing.T) {
	if !hasAMX {
		t.Skip("no AMX-INT8 tiles on this CPU (or the kernel refused the tile data): the tile kernels are not run here")
	}
	r := rand.New(rand.NewPCG(31, 32))
	const out, in = 2048, 1024 // 2M weights: 1M for each of 2 workers
	for _, bits := range []int{4, 8} {
		q, _ := quantFixture(r, out, in, bits, 64)
		l, err := NewQuant(out, in, q)
		require.NoError(t, err)
		l.Pool = NewPoolMode(2, ModeFast)
		require.True(t, amxTiles(16, []*Linear{l}, 2))
		for _, rows := range []int{16, 19, 31} {
			x := randVec(r, rows*in, 1)
			want, got := make([]float32, rows*out), make([]float32, rows*out)
			withPanels(panelGo, func() { l.Forward(want, x, rows) })
			u, a, p := usePanels, usePanelAsm, useAMX
			usePanels, usePanelAsm, useAMX = true, true, true // amxTileRows as it is
			l.Forward(got, x, rows)
			usePanels, usePanelAsm, useAMX = u, a, p
			for i := range want {
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%d bits, %d rows, element %d", bits, rows, i)
			}
		}
	}
}
