"""Minimal safetensors writer/reader and dtype helpers (numpy only).

Written by hand (not the `safetensors` package) so that the exact bytes are under our control: the goldens must
exercise the Go loader's own parser, including dtypes numpy lacks (BF16) and U32 packed quantized weights.

Layout (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, then N bytes of JSON
header ({name: {dtype, shape, data_offsets:[begin,end)}, "__metadata__": {...}}) padded with spaces to a multiple of
8, then the raw little-endian tensor bytes. Tensors are written in sorted name order, contiguous, no gaps.
"""

import json
import struct

import numpy as np

_ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4, "F64": 8, "I64": 8, "I32": 4, "U8": 1}


def f32_to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bit patterns, round-to-nearest-even (torch's rounding), NaN kept quiet."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    rounding = ((u >> 16) & 1) + 0x7FFF
    out = ((u + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bf16_bits_to_f32(b):
    return (np.ascontiguousarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(a, dtype):
    """Round float32 values to what `dtype` ("F32", "F16", "BF16") stores, returned as float32."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.copy()
    if dtype == "F16":
        return a.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(a))
    raise ValueError(f"unsupported dtype {dtype}")


class Tensor:
    """A tensor ready for writing: dtype tag, shape and raw little-endian bytes."""

    def __init__(self, dtype, shape, data):
        self.dtype = dtype
        self.shape = [int(s) for s in shape]
        self.data = data
        n = 1
        for s in self.shape:
            n *= s
        if n * _ITEMSIZE[dtype] != len(data):
            raise ValueError(f"tensor bytes {len(data)} != {n}*{_ITEMSIZE[dtype]} for {dtype}{self.shape}")


def tensor_from_f32(a, dtype="F32"):
    """Build a Tensor from a float array, converting to dtype F32/F16/BF16."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        data = a.astype("<f4").tobytes()
    elif dtype == "F16":
        data = a.astype("<f2").tobytes()
    elif dtype == "BF16":
        data = f32_to_bf16_bits(a).astype("<u2").tobytes()
    else:
        raise ValueError(dtype)
    return Tensor(dtype, a.shape, data)


def tensor_u32(a):
    a = np.asarray(a, dtype=np.uint32)
    return Tensor("U32", a.shape, a.astype("<u4").tobytes())


def write_safetensors(path, tensors, metadata=None):
    names = sorted(tensors)
    header = {}
    off = 0
    for n in names:
        t = tensors[n]
        header[n] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + len(t.data)]}
        off += len(t.data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for n in names:
            f.write(tensors[n].data)


def read_safetensors(path):
    """Returns ({name: (dtype, shape, bytes)}, metadata)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        out[name] = (h["dtype"], h["shape"], buf[base + b : base + e])
    return out, meta


def to_numpy(dtype, shape, data):
    """Decode raw bytes to numpy (floats as float32, U32 as uint32)."""
    if dtype == "F32":
        a = np.frombuffer(data, dtype="<f4").astype(np.float32)
    elif dtype == "F16":
        a = np.frombuffer(data, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        a = bf16_bits_to_f32(np.frombuffer(data, dtype="<u2"))
    elif dtype == "U32":
        a = np.frombuffer(data, dtype="<u4").astype(np.uint32)
    else:
        raise ValueError(dtype)
    return a.reshape(shape)


def write_f32(path, a):
    """Raw little-endian float32, row-major, no header (shape goes in the JSON index)."""
    np.ascontiguousarray(a, dtype="<f4").tofile(path)
