package kernel

import (
	"fmt"
	"unsafe"
)

// Quant is an MLX affine-quantized [Out, In] matrix: per row a little-endian bit stream of Bits-bit codes
// (Codes, In·Bits/32 words per row) and per group of Group columns a scale and a bias, so that
// W[r,j] = Scales[r, j/Group]·q + Biases[r, j/Group].
type Quant struct {
	Bits, Group int
	Codes       []uint32
	Scales      []float32
	Biases      []float32
}

// ValidQuant reports whether (bits, group) is a supported MLX affine format.
func ValidQuant(bits, group int) error {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("quantization bits %d not supported (want 2, 3, 4, 5, 6 or 8)", bits)
	}
	switch group {
	case 32, 64, 128:
	default:
		return fmt.Errorf("quantization group size %d not supported (want 32, 64 or 128)", group)
	}
	return nil
}

// wordsPerRow is the number of uint32 code words in one row of in columns.
func (q *Quant) wordsPerRow(in int) int { return in * q.Bits / 32 }

// Byte → codes lookup tables: one table read replaces a shift, a mask and an int→float conversion per code.
var (
	lut2 [256][4]float32
	lut4 [256][2]float32
	lut8 [256]float32
)

func init() {
	for b := range 256 {
		lut2[b] = [4]float32{float32(b & 3), float32(b >> 2 & 3), float32(b >> 4 & 3), float32(b >> 6)}
		lut4[b] = [2]float32{float32(b & 15), float32(b >> 4)}
		lut8[b] = float32(b)
	}
}

// UnpackCodes writes the in codes of one packed row as exact float32 integers into dst[:in].
func UnpackCodes(dst []float32, words []uint32, bits, in int) {
	dst = dst[:in]
	if in == 0 {
		return
	}
	switch bits {
	case 4:
		for w, v := range words[:in/8] {
			d := (*[8]float32)(dst[w*8 : w*8+8])
			p := lut4[v&255]
			d[0], d[1] = p[0], p[1]
			p = lut4[v>>8&255]
			d[2], d[3] = p[0], p[1]
			p = lut4[v>>16&255]
			d[4], d[5] = p[0], p[1]
			p = lut4[v>>24]
			d[6], d[7] = p[0], p[1]
		}
	case 8:
		for w, v := range words[:in/4] {
			d := (*[4]float32)(dst[w*4 : w*4+4])
			d[0] = lut8[v&255]
			d[1] = lut8[v>>8&255]
			d[2] = lut8[v>>16&255]
			d[3] = lut8[v>>24]
		}
	case 2:
		if useAVX2 {
			unpackStream(dst, words, bits)
			return
		}
		for w, v := range words[:in/16] {
			d := (*[16]float32)(dst[w*16 : w*16+16])
			*(*[4]float32)(d[0:4]) = lut2[v&255]
			*(*[4]float32)(d[4:8]) = lut2[v>>8&255]
			*(*[4]float32)(d[8:12]) = lut2[v>>16&255]
			*(*[4]float32)(d[12:16]) = lut2[v>>24]
		}
	default:
		// 3, 5 and 6 bits: codes straddle word boundaries.
		unpackStream(dst, words, bits)
	}
}

// unpackStream writes the len(dst) codes of a bits-bit stream, with AVX2 for every block of 8 codes whose
// 8-byte read stays inside words, then one code at a time through a 64-bit window.
func unpackStream(dst []float32, words []uint32, bits int) {
	j0 := 0
	if useAVX2 && bits <= 6 {
		src := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 4*len(words))
		// Block b reads src[b·bits : b·bits+8].
		if len(src) >= 8 {
			blocks := min((len(src)-8)/bits+1, len(dst)/8)
			t := &unpackTabs[bits]
			unpackBitsAVX2(&dst[0], &src[0], blocks, bits, &t.ctl[0], &t.shifts[0], uint32(1)<<bits-1)
			j0 = 8 * blocks
		}
	}
	if j0 >= len(dst) {
		return
	}
	mask := uint64(1)<<bits - 1
	// Start at bit bits·j0, a byte boundary: the window holds the rest of its word.
	bit := bits * j0
	wi := bit / 32
	acc := uint64(words[wi]) >> (bit % 32)
	have := 32 - bit%32
	wi++
	for j := j0; j < len(dst); j++ {
		if have < bits {
			acc |= uint64(words[wi]) << have
			wi++
			have += 32
		}
		dst[j] = float32(acc & mask)
		acc >>= bits
		have -= bits
	}
}

// unpackCodesBytes writes the len(dst) codes of one packed row of 2, 3, 5 or 6 bits as bytes (the layout of
// 8-bit codes): with AVX-512 for every block of 8 codes whose 8-byte read stays inside words, then one code at
// a time.
func unpackCodesBytes(dst []byte, words []uint32, bits int) {
	if len(dst) == 0 {
		return
	}
	src := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 4*len(words))
	j0 := 0
	if useAVX512 && len(src) >= 8 {
		blocks := min((len(src)-8)/bits+1, len(dst)/8)
		t := &unpackTabs[bits]
		unpackBytesAVX512(&dst[0], &src[0], blocks, bits, &t.ctl[0], &t.shifts[0], uint32(1)<<bits-1)
		j0 = 8 * blocks
	}
	mask := uint16(1)<<bits - 1
	for j := j0; j < len(dst); j++ {
		bit := bits * j
		v := uint16(src[bit/8])
		if b := bit/8 + 1; b < len(src) {
			v |= uint16(src[b]) << 8
		}
		dst[j] = byte(v >> (bit % 8) & mask)
	}
}

// unpackTab is unpackBitsAVX2's tables for one width: per code k of a block of 8, the VPSHUFB control that
// puts source bytes (bits·k)/8 and the next into dword k (per 128-bit lane, both lanes holding the block's 8
// bytes), and the right shift (bits·k) mod 8.
type unpackTab struct {
	ctl    [32]byte
	shifts [8]uint32
}

var unpackTabs [7]unpackTab

// qbTab is dotQbRowsAVX512's table for one width: the shuffle for 16 codes (code k's two source bytes
// (bits·k)/8 and the next into dword k of 128-bit lane k/4, every lane holding the step's 16 bytes), the
// shifts (bits·k) mod 8 and the mask.
type qbTab struct {
	ctl    [64]byte
	shifts [16]uint32
	mask   [16]uint32
}

var qbTabs [7]qbTab

func init() {
	for _, bits := range []int{2, 3, 5, 6} {
		t := &unpackTabs[bits]
		for k := range 8 {
			lo := (bits * k) / 8
			d := 16*(k/4) + 4*(k%4)
			t.ctl[d], t.ctl[d+1], t.ctl[d+2], t.ctl[d+3] = byte(lo), byte(lo+1), 0x80, 0x80
			t.shifts[k] = uint32(bits * k % 8)
		}
		q := &qbTabs[bits]
		for k := range 16 {
			lo := (bits * k) / 8
			d := 4 * k
			q.ctl[d], q.ctl[d+1], q.ctl[d+2], q.ctl[d+3] = byte(lo), byte(lo+1), 0x80, 0x80
			q.shifts[k] = uint32(bits * k % 8)
			q.mask[k] = 1<<bits - 1
		}
	}
}

// PackCodes packs codes (each < 2^bits) of one row into dst[:len(codes)·bits/32] as the little-endian bit stream
// MLX uses. len(codes) must be a multiple of 32.
func PackCodes(dst []uint32, codes []uint8, bits int) {
	n := len(codes) * bits / 32
	clear(dst[:n])
	for j, c := range codes {
		bit := j * bits
		w, s := bit/32, bit%32
		dst[w] |= uint32(c) << s
		if s+bits > 32 {
			dst[w+1] |= uint32(c) >> (32 - s)
		}
	}
}
