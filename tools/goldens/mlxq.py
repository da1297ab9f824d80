"""MLX affine quantization, exactly as MODEL-REFERENCE §1.4 describes the stored format (numpy only).

Stored per quantized Linear X with logical weight [out, in] (experts: [E, out, in]):
  X.weight  uint32 [..., out, in*bits/32]   codes as one little-endian bit stream per row
  X.scales  [..., out, in/group_size]        float dtype of the checkpoint (F16 or BF16)
  X.biases  [..., out, in/group_size]
  W[r, j] = scales[r, j // gs] * q[r, j] + biases[r, j // gs]     (evaluated in float32)

The quantizer itself (min/max per group) is ours; MLX's own rounding choices differ, but they only decide which
codes are stored, never how a stored checkpoint must be read. The goldens are computed from the dequantized values.
"""

import numpy as np

from stio import round_to

BITS = (2, 3, 4, 5, 6, 8)
GROUPS = (32, 64, 128)


def check_shape(in_dim, bits, group_size):
    if bits not in BITS:
        raise ValueError(f"bits {bits} not in {BITS}")
    if group_size not in GROUPS:
        raise ValueError(f"group_size {group_size} not in {GROUPS}")
    if in_dim % group_size:
        raise ValueError(f"in={in_dim} not a multiple of group_size {group_size}")
    if (in_dim * bits) % 32:
        raise ValueError(f"in*bits={in_dim * bits} not a multiple of 32")


def pack(q, bits):
    """q: integer codes [..., out, in] in [0, 2^bits) -> uint32 [..., out, in*bits/32] little-endian bit stream."""
    q = np.asarray(q, dtype=np.uint64)
    *lead, n = q.shape
    bit = (q[..., None] >> np.arange(bits, dtype=np.uint64)) & 1  # [..., in, bits], LSB first
    bit = bit.reshape(*lead, n * bits // 32, 32)
    words = (bit << np.arange(32, dtype=np.uint64)).sum(axis=-1)
    return words.astype(np.uint32)


def unpack(words, bits, in_dim):
    """Inverse of pack: uint32 [..., out, W] -> codes [..., out, in_dim] (uint32)."""
    w = np.asarray(words, dtype=np.uint64)
    *lead, nw = w.shape
    if nw * 32 != in_dim * bits:
        raise ValueError(f"words {nw}*32 != in {in_dim} * bits {bits}")
    bit = (w[..., None] >> np.arange(32, dtype=np.uint64)) & 1
    bit = bit.reshape(*lead, in_dim, bits)
    return (bit << np.arange(bits, dtype=np.uint64)).sum(axis=-1).astype(np.uint32)


def dequantize(words, scales, biases, bits, group_size):
    """float32 [..., out, in] from the stored tensors (scales/biases already decoded to float32)."""
    scales = np.asarray(scales, dtype=np.float32)
    biases = np.asarray(biases, dtype=np.float32)
    in_dim = scales.shape[-1] * group_size
    q = unpack(words, bits, in_dim).astype(np.float32)
    s = np.repeat(scales, group_size, axis=-1)
    b = np.repeat(biases, group_size, axis=-1)
    return (s * q + b).astype(np.float32)  # s*q is exact in float32 (<= 11+8 significant bits), one rounding on +b


def quantize(w, bits, group_size, sdtype):
    """w: float32 [..., out, in] -> (packed uint32, scales f32 (rounded to sdtype), biases f32 (rounded))."""
    w = np.asarray(w, dtype=np.float32)
    *lead, out, n = w.shape
    check_shape(n, bits, group_size)
    g = w.reshape(*lead, out, n // group_size, group_size)
    lo = g.min(axis=-1)
    hi = g.max(axis=-1)
    levels = float(2**bits - 1)
    scale = (hi - lo) / levels
    scale = np.where(scale > 0, scale, np.float32(1e-4)).astype(np.float32)
    scale = round_to(scale, sdtype)
    bias = round_to(lo, sdtype)
    scale = np.where(scale != 0, scale, round_to(np.float32(1e-4), sdtype))
    q = np.rint((g - bias[..., None]) / scale[..., None])
    q = np.clip(q, 0, levels).astype(np.uint32).reshape(*lead, out, n)
    return pack(q, bits), scale.astype(np.float32), bias.astype(np.float32)
