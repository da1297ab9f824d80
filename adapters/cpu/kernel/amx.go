package kernel

import "encoding/binary"

// The fast mode's panel products on AMX tiles (gen_amx.py): where the CPU has AMX-INT8 and the OS grants the
// process its tile data, a block of 16 input rows runs against each panel as one tile product per 64-input
// block (TDPBSUD sums the signed input codes times the unsigned weight codes exactly in int32, as VPDPBUSD
// does), then converts and scales per row with the VNNI panel kernels' float operations in their order. So a
// row's outputs carry the same bits on either path and in any block of rows: a prefill row and a decode step
// (one row, always VNNI) agree, and greedy speculative output stays the plain output.

// amxMinRows is the block of rows that runs on tiles, and amxMinProduct the fewest rows of a product that
// takes them whatever its size. Measured on a 2-core AMX Xeon (docs/performance.md): a tile kernel's block
// costs ~25 cycles of tile work however few its rows, which VNNI beats below 16 rows; at 16 rows alone (a
// verify block, the drafter's block) a product is 1.1–1.5× faster in isolation, but inside a verify of the
// bundled gocoder (products of at most 2.6M weights) no faster, as two workers split each product into short
// calls that each fill and drain the tile pipeline; prefill-sized products (several blocks of 16 over the
// same panels) gain, and so do 16-row products of amxWorkerWeights weights or more per worker (a verify of
// 16 rows on hybrid synths of hidden 768–1536: 8–12% faster).
const (
	amxMinRows       = 16
	amxMinProduct    = 32
	amxWorkerWeights = 1 << 20
)

// amxTileRows is the product size the tiles start at whatever its weights (tests lower it to amxMinRows to
// run them on every block of 16).
var amxTileRows = amxMinProduct

// amxTiles reports whether a product of rows input rows over the weights of ls, split across threads
// workers, runs its blocks of amxMinRows rows on tiles (where the CPU and OS allow them).
func amxTiles(rows int, ls []*Linear, threads int) bool {
	if rows >= amxTileRows {
		return true
	}
	if rows < amxMinRows {
		return false
	}
	weights := 0
	for _, m := range ls {
		weights += m.Out * m.In
	}
	return weights >= amxWorkerWeights*max(threads, 1)
}

// amxRing is the 4-bit tile kernels' ring of unpacked codes (8 pairs of blocks of one panel, 1 KiB each).
const amxRing = 8 << 10

// tileConfig is the 64-byte operand of LDTILECFG (palette 1): per tile register its bytes per row and rows.
type tileConfig [64]byte

// setTile sets tile t to rows × colsb bytes.
func (c *tileConfig) setTile(t, rows, colsb int) {
	c[16+2*t] = byte(colsb)
	c[16+2*t+1] = byte(colsb >> 8)
	c[48+t] = byte(rows)
}

// amxConfig is the tile kernels' configuration: two sets of three tiles (set s: tile 3s holds a 64-input block's
// int32 sums, 16 rows × 16; tile 3s+1 the 16 rows' 64 input codes; tile 3s+2 the panel's weight codes, 16 rows
// of 64 bytes), so consecutive blocks' products overlap.
var amxConfig = func() *tileConfig {
	c := &tileConfig{0: 1}
	for s := range 2 {
		c.setTile(3*s, amxMinRows, 64)
		c.setTile(3*s+1, amxMinRows, 64)
		c.setTile(3*s+2, 16, 64)
	}
	return c
}()

// amxGroup is the index of a group size in amxKernels (-1 where no tile kernel takes it: the tile kernels run
// the panel form's 64-input blocks).
func amxGroup(gs int) int {
	switch gs {
	case 64:
		return 0
	case 128:
		return 1
	}
	return -1
}

// amxInputs writes the tile kernels' input codes of row i of a block of n rows: per block of 32 inputs, its 32
// codes in the order the kernels' weight codes take them (4-bit: the codes of the low nibbles' inputs, then the
// high nibbles', which the record holds 64 bytes apart; 8-bit: the record's codes as they are), the block's rows
// side by side per pair of blocks, so a pair's tile is one run of n·64 bytes. rec is the row's first record,
// stride the bytes between its chunks' records, xa the block's first row's.
func amxInputs(xa, rec []byte, stride, blocks int, nibble bool, n, i int) {
	// 8 bytes at a time (copy's call costs more than these 16- and 32-byte moves).
	mv := func(d, s []byte) { binary.LittleEndian.PutUint64(d, binary.LittleEndian.Uint64(s)) }
	for k := range blocks {
		d := xa[(k/2)*n*64+i*64+32*(k%2):]
		if nibble {
			r := rec[(k/4)*stride+16*(k%4):]
			mv(d[0:], r[0:])
			mv(d[8:], r[8:])
			mv(d[16:], r[64:])
			mv(d[24:], r[72:])
			continue
		}
		r := rec[(k/4)*stride+32*(k%4):]
		for o := 0; o < 32; o += 8 {
			mv(d[o:], r[o:])
		}
	}
}

// useAMX allows the tile kernels for the blocks of amxMinRows rows of the products amxTiles picks, where
// amxReady (tests flip it).
var useAMX = true

// AMX reports whether the fast mode's prefill-sized (and large 16-row) panel products run on AMX tiles in this process (asking the
// OS for the tile state if nobody has yet).
func AMX() bool { return useAMX && usePanelAsm && amxReady() }

// SetAMX allows the tile kernels or not (they run only where the CPU and OS allow them: amxReady) and reports
// whether they now run. Both paths give the same bits; it exists to compare them (benchmarks, bench runs) and
// to rule the tiles out when diagnosing. Call it before products run, not beside them.
func SetAMX(on bool) bool {
	useAMX = on
	return AMX()
}
