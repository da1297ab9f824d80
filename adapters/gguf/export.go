package gguf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/higgs-go/higgs/adapters/quant"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// ExportOptions choose the encoding of an export.
type ExportOptions struct {
	// Type encodes every matrix (embedding and LM head included); norms stay F32, as llama.cpp keeps them.
	Type Type
	// Requantize allows lossy conversions (rounding to f16/bf16, requantizing to Q8_0/Q4_0). Without it a
	// weight that Type cannot hold exactly is an error wrapping ErrInexact.
	Requantize bool
	// Name is general.name (default: the directory's base name).
	Name string
}

// ExportResult describes a written file.
type ExportResult struct {
	Architecture string `json:"architecture"`
	Type         string `json:"type"`
	Tensors      int    `json:"tensors"`
	Layers       int    `json:"layers"`
	Vocab        int    `json:"vocab"`
	// Exact is true when every weight was stored unchanged (always, unless Requantize was set and used).
	Exact bool `json:"exact"`
	// Rounded counts the matrices that were rounded or requantized (0 when Exact).
	Rounded int `json:"rounded"`
}

// qwen3Config is the part of a dense Qwen3 config.json the export needs.
type qwen3Config struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures"`
	Hidden        int      `json:"hidden_size"`
	Inter         int      `json:"intermediate_size"`
	Layers        int      `json:"num_hidden_layers"`
	Heads         int      `json:"num_attention_heads"`
	KVHeads       int      `json:"num_key_value_heads"`
	HeadDim       int      `json:"head_dim"`
	Vocab         int      `json:"vocab_size"`
	Context       int      `json:"max_position_embeddings"`
	RMSEps        float64  `json:"rms_norm_eps"`
	RopeTheta     float64  `json:"rope_theta"`
	RopeParams    *struct {
		RopeTheta float64 `json:"rope_theta"`
		RopeType  string  `json:"rope_type"`
	} `json:"rope_parameters"`
	RopeScaling  json.RawMessage `json:"rope_scaling"`
	Tied         bool            `json:"tie_word_embeddings"`
	Quantization *quant.Spec     `json:"quantization"`
}

func readQwen3Config(dir string) (qwen3Config, error) {
	var c qwen3Config
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return c, fmt.Errorf("gguf export: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("gguf export: config.json: %w", err)
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.RopeTheta == 0 && c.RopeParams != nil {
		c.RopeTheta = c.RopeParams.RopeTheta
	}
	var errs []error
	if c.ModelType != "qwen3" {
		errs = append(errs, fmt.Errorf("model_type %q: only dense Qwen3 (qwen3) exports to GGUF here", c.ModelType))
	}
	if c.Hidden <= 0 || c.Inter <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.Vocab <= 0 {
		errs = append(errs, fmt.Errorf("hidden %d, intermediate %d, layers %d, heads %d/%d, head_dim %d, vocab %d: want all positive",
			c.Hidden, c.Inter, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Vocab))
	}
	if s := string(c.RopeScaling); s != "" && s != "null" {
		errs = append(errs, fmt.Errorf("rope_scaling %s is not exported (plain RoPE only)", s))
	}
	if c.RopeParams != nil && c.RopeParams.RopeType != "" && c.RopeParams.RopeType != "default" {
		errs = append(errs, fmt.Errorf("rope_type %q is not exported (plain RoPE only)", c.RopeParams.RopeType))
	}
	if c.Quantization != nil {
		if err := c.Quantization.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RMSEps == 0 {
		c.RMSEps = 1e-6
	}
	if c.Context == 0 {
		c.Context = 4096
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("gguf export: %s: %w", dir, err)
	}
	return c, nil
}

// fileType is general.file_type (llama_ftype) for a matrix encoding.
func fileType(t Type) uint32 {
	switch t {
	case F16:
		return 1
	case Q4_0:
		return 2
	case Q8_0:
		return 7
	case BF16:
		return 32
	}
	return 0
}

// ExportQwen3 writes the dense Qwen3 checkpoint in dir (config.json, safetensors in the Hugging Face or
// mlx-lm layout, float or MLX affine-quantized; tokenizer.json) to out as a GGUF file for llama.cpp's
// "qwen3" architecture. MLX affine weights whose bias is −2^(bits−1)·scale with f16-exact scales (what
// `higgs-verify synth --symmetric` writes) are stored bit-exactly as Q8_0 (bits ≤ 8) or Q4_0 (bits 4); float
// weights go exactly to F32, and to F16/BF16 when each value fits. Anything else is refused with an error
// wrapping ErrInexact unless o.Requantize.
func ExportQwen3(dir string, out io.Writer, o ExportOptions) (ExportResult, error) {
	if _, _, ok := o.Type.Block(); !ok {
		return ExportResult{}, fmt.Errorf("gguf export: tensor type %s unsupported", o.Type)
	}
	c, err := readQwen3Config(dir)
	if err != nil {
		return ExportResult{}, err
	}
	tok, err := tokenizerKVs(dir, c.Vocab)
	if err != nil {
		return ExportResult{}, fmt.Errorf("gguf export: %w", err)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return ExportResult{}, fmt.Errorf("gguf export: %w", err)
	}
	defer st.Close()
	name := o.Name
	if name == "" {
		name = filepath.Base(filepath.Clean(dir))
	}
	const a = "qwen3."
	kvs := []KV{
		{"general.architecture", "qwen3"},
		{"general.name", name},
		{"general.file_type", fileType(o.Type)},
		{"general.quantization_version", uint32(2)},
		{a + "context_length", uint32(c.Context)},
		{a + "embedding_length", uint32(c.Hidden)},
		{a + "block_count", uint32(c.Layers)},
		{a + "feed_forward_length", uint32(c.Inter)},
		{a + "attention.head_count", uint32(c.Heads)},
		{a + "attention.head_count_kv", uint32(c.KVHeads)},
		{a + "attention.key_length", uint32(c.HeadDim)},
		{a + "attention.value_length", uint32(c.HeadDim)},
		{a + "rope.freq_base", float32(c.RopeTheta)},
		{a + "attention.layer_norm_rms_epsilon", float32(c.RMSEps)},
	}
	kvs = append(kvs, tok...)

	x := &exporter{st: st, q: c.Quantization, typ: o.Type, requant: o.Requantize}
	H, D, I := c.Hidden, c.HeadDim, c.Inter
	x.matrix("model.embed_tokens", "token_embd.weight", c.Vocab, H)
	x.vector("model.norm.weight", "output_norm.weight", H)
	if !c.Tied {
		x.matrix("lm_head", "output.weight", c.Vocab, H)
	}
	for i := range c.Layers {
		p, g := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		x.vector(p+"input_layernorm.weight", g+"attn_norm.weight", H)
		x.matrix(p+"self_attn.q_proj", g+"attn_q.weight", c.Heads*D, H)
		x.matrix(p+"self_attn.k_proj", g+"attn_k.weight", c.KVHeads*D, H)
		x.matrix(p+"self_attn.v_proj", g+"attn_v.weight", c.KVHeads*D, H)
		x.matrix(p+"self_attn.o_proj", g+"attn_output.weight", H, c.Heads*D)
		x.vector(p+"self_attn.q_norm.weight", g+"attn_q_norm.weight", D)
		x.vector(p+"self_attn.k_norm.weight", g+"attn_k_norm.weight", D)
		x.vector(p+"post_attention_layernorm.weight", g+"ffn_norm.weight", H)
		x.matrix(p+"mlp.gate_proj", g+"ffn_gate.weight", I, H)
		x.matrix(p+"mlp.up_proj", g+"ffn_up.weight", I, H)
		x.matrix(p+"mlp.down_proj", g+"ffn_down.weight", H, I)
		if x.err != nil {
			break
		}
	}
	if x.err != nil {
		return ExportResult{}, fmt.Errorf("gguf export: %w", x.err)
	}
	if left := st.Unused(); len(left) > 0 {
		return ExportResult{}, fmt.Errorf("gguf export: %d tensors have no place in a qwen3 GGUF (first %s): not a dense Qwen3 checkpoint", len(left), left[0])
	}
	if err := Write(out, kvs, x.ts); err != nil {
		return ExportResult{}, fmt.Errorf("gguf export: %w", err)
	}
	return ExportResult{Architecture: "qwen3", Type: o.Type.String(), Tensors: len(x.ts), Layers: c.Layers,
		Vocab: c.Vocab, Exact: x.rounded == 0, Rounded: x.rounded}, nil
}

type exporter struct {
	st      *safetensors.Store
	q       *quant.Spec
	typ     Type
	requant bool
	ts      []Tensor
	rounded int
	err     error
}

// vector stores a 1-D float tensor (a norm) as F32, which holds every F32/F16/BF16 value exactly.
func (x *exporter) vector(src, dst string, n int) {
	if x.err != nil {
		return
	}
	t, err := x.st.Tensor(src)
	if err != nil {
		x.err = err
		return
	}
	x.st.MarkUsed(src)
	v, err := t.Float32()
	if err != nil {
		x.err = err
		return
	}
	if len(v) != n {
		x.err = fmt.Errorf("%s: %d values, want %d", src, len(v), n)
		return
	}
	x.ts = append(x.ts, Tensor{Name: dst, Dims: []uint64{uint64(n)}, Type: F32, Data: AppendF32(nil, v)})
}

// matrix stores the Linear (or embedding) base, [rows, cols] row-major, as x.typ.
func (x *exporter) matrix(base, dst string, rows, cols int) {
	if x.err != nil {
		return
	}
	var data []byte
	var err error
	if x.st.Has(base + ".scales") {
		data, err = x.quantized(base, rows, cols)
	} else {
		data, err = x.float(base, rows, cols)
	}
	if err != nil {
		x.err = fmt.Errorf("%s: %w", base, err)
		return
	}
	x.ts = append(x.ts, Tensor{Name: dst, Dims: []uint64{uint64(cols), uint64(rows)}, Type: x.typ, Data: data})
}

func (x *exporter) float(base string, rows, cols int) ([]byte, error) {
	t, err := x.st.Tensor(base + ".weight")
	if err != nil {
		return nil, err
	}
	x.st.MarkUsed(base + ".weight")
	if len(t.Shape) != 2 || t.Shape[0] != rows || t.Shape[1] != cols {
		return nil, fmt.Errorf("shape %v, want [%d %d]", t.Shape, rows, cols)
	}
	v, err := t.Float32()
	if err != nil {
		return nil, err
	}
	return x.encodeFloat(v, rows*cols)
}

// encodeFloat encodes float weights as x.typ: exactly, or rounded when allowed (counted in x.rounded).
func (x *exporter) encodeFloat(v []float32, n int) ([]byte, error) {
	switch x.typ {
	case F32:
		return AppendF32(make([]byte, 0, 4*n), v), nil
	case F16, BF16:
		enc := AppendF16
		if x.typ == BF16 {
			enc = AppendBF16
		}
		b, err := enc(make([]byte, 0, 2*n), v, false)
		if err == nil || !x.requant {
			if err != nil {
				err = fmt.Errorf("%w; pass --requantize to round", err)
			}
			return b, err
		}
		x.rounded++
		return enc(make([]byte, 0, 2*n), v, true)
	}
	if !x.requant {
		return nil, fmt.Errorf("%w: float weights have no exact %s form (only MLX affine weights with bias = −2^(bits−1)·scale do); pass --requantize to quantize", ErrInexact, x.typ)
	}
	x.rounded++
	if x.typ == Q8_0 {
		return QuantizeQ8_0(nil, v)
	}
	return QuantizeQ4_0(nil, v)
}

// quantized converts one MLX affine Linear. Symmetric groups (bias = −2^(bits−1)·scale) map code for code:
// value = scale·(c − 2^(bits−1)), which is Q8_0's d·q with q = c − 2^(bits−1), and for 4 bits Q4_0's
// d·(n − 8) with n = c. Otherwise the weights are dequantized as higgs does (scale·c + bias in float32) and
// encoded as floats.
func (x *exporter) quantized(base string, rows, cols int) ([]byte, error) {
	names := []string{base + ".weight", base + ".scales", base + ".biases"}
	var ts [3]*safetensors.Tensor
	for i, n := range names {
		t, err := x.st.Tensor(n)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	x.st.MarkUsed(names...)
	spec, err := inferSpec(ts[0].Shape, ts[1].Shape, cols)
	if err != nil {
		return nil, err
	}
	if x.q != nil && *x.q != spec {
		return nil, fmt.Errorf("config.json states %s quantization, the tensor shapes say %s", *x.q, spec)
	}
	out, in, err := quant.CheckShapes(ts[0].Shape, ts[1].Shape, ts[2].Shape, spec)
	if err != nil {
		return nil, err
	}
	if out != rows || in != cols {
		return nil, fmt.Errorf("logical shape [%d %d], want [%d %d]", out, in, rows, cols)
	}
	packed, err := ts[0].Uint32()
	if err != nil {
		return nil, err
	}
	scales, err := ts[1].Float32()
	if err != nil {
		return nil, err
	}
	biases, err := ts[2].Float32()
	if err != nil {
		return nil, err
	}
	words, groups := in*spec.Bits/32, in/spec.GroupSize
	if asym := x.asymmetry(scales, biases, spec); asym == "" && (x.typ == Q8_0 || x.typ == Q4_0 && spec.Bits == 4) {
		return encodeSymmetric(x.typ, packed, scales, rows, in, words, groups, spec)
	} else if x.typ == Q8_0 || x.typ == Q4_0 {
		why := asym
		if why == "" {
			why = fmt.Sprintf("%d-bit codes do not fit Q4_0's 4 bits", spec.Bits)
		}
		if !x.requant {
			return nil, fmt.Errorf("%w: MLX %s weights have no exact %s form: %s; pass --requantize to requantize", ErrInexact, spec, x.typ, why)
		}
	}
	v := make([]float32, rows*in)
	if err := quant.Dequantize(v, packed, scales, biases, rows, in, spec); err != nil {
		return nil, err
	}
	return x.encodeFloat(v, rows*in)
}

// inferSpec reads an MLX affine Linear's bits and group size off its shapes (packed [rows, cols·bits/32],
// scales [rows, cols/group]): config.json may omit the quantization block (mlx-lm writes it; not every tool
// does), and when it has one the two must agree.
func inferSpec(weight, scales []int, cols int) (quant.Spec, error) {
	if len(weight) != 2 || len(scales) != 2 || weight[1] <= 0 || scales[1] <= 0 || cols%scales[1] != 0 || weight[1]*32%cols != 0 {
		return quant.Spec{}, fmt.Errorf("quantized shapes weight %v, scales %v do not fit %d inputs", weight, scales, cols)
	}
	spec := quant.Spec{Bits: weight[1] * 32 / cols, GroupSize: cols / scales[1]}
	return spec, spec.Validate()
}

// asymmetry returns "" when every group is symmetric with an f16-exact scale, else why not (first group).
func (x *exporter) asymmetry(scales, biases []float32, spec quant.Spec) string {
	zero := float32(int(1) << (spec.Bits - 1))
	for g, s := range scales {
		if biases[g] != -zero*s {
			return fmt.Sprintf("group %d has bias %g, not −%g·scale = %g", g, biases[g], zero, -zero*s)
		}
		if !f16Exact(s) {
			return fmt.Sprintf("group %d's scale %g is not an f16 value", g, s)
		}
	}
	return ""
}

// encodeSymmetric re-blocks symmetric MLX codes into 32-element Q8_0 or Q4_0 blocks (a group of 64 or 128
// becomes 2 or 4 blocks sharing its scale).
func encodeSymmetric(t Type, packed []uint32, scales []float32, rows, in, words, groups int, spec quant.Spec) ([]byte, error) {
	_, bb, _ := t.Block()
	dst := make([]byte, 0, rows*in/32*bb)
	zero := int(1) << (spec.Bits - 1)
	var q8 [32]int8
	var q4 [32]uint8
	var err error
	for r := range rows {
		row := packed[r*words : (r+1)*words]
		for b := 0; b < in; b += 32 {
			s := scales[r*groups+b/spec.GroupSize]
			for j := range 32 {
				c := quant.Code(row, b+j, spec.Bits)
				q8[j], q4[j] = int8(int(c)-zero), uint8(c)
			}
			if t == Q8_0 {
				dst, err = AppendQ8_0Codes(dst, s, q8[:])
			} else {
				dst, err = AppendQ4_0Codes(dst, s, q4[:])
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return dst, nil
}
