package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/cpu/kernel/machine"
	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/cpu/kernel/workers"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// syntheticArch is a ~100M-parameter hybrid (Qwen3.5-like: 3 GDN layers per gated attention layer, dense
// SwiGLU, tied 16k vocabulary) for benchmarks. It is built in memory: no files.
func syntheticArch() hfmodel.Arch {
	a := hfmodel.Arch{
		Hidden: 1024, Vocab: 16384, Layers: 8, Eps: 1e-6, ContextLength: 4096,
		Heads: 8, KVHeads: 2, HeadDim: 128, RotaryDims: 32, RopeTheta: 1e7, OutputGate: true,
		KeyHeads: 8, ValueHeads: 16, KeyDim: 64, ValueDim: 64, ConvKernel: 4,
		Intermediate: 2048,
	}
	for i := range a.Layers {
		k := ports.LayerRecurrent
		if (i+1)%4 == 0 {
			k = ports.LayerAttention
		}
		a.Kinds = append(a.Kinds, k)
		a.MoE = append(a.MoE, false)
	}
	return a
}

// randLinear makes a random [out,in] Linear in the given storage ("f32", "bf16", "q4").
func randLinear(r *rand.Rand, format string, out, in int) *kernel.Linear {
	sc := float32(1.5 / math.Sqrt(float64(in)))
	var l *kernel.Linear
	var err error
	switch format {
	case "q4":
		q := kernel.Quant{Bits: 4, Group: 64, Codes: make([]uint32, out*in/8), Scales: make([]float32, out*in/64), Biases: make([]float32, out*in/64)}
		for i := range q.Codes {
			q.Codes[i] = r.Uint32()
		}
		for i := range q.Scales {
			q.Scales[i] = sc * 2 / 15
			q.Biases[i] = -sc
		}
		l, err = kernel.NewQuant(out, in, q)
	case "bf16":
		w := make([]uint16, out*in)
		for i := range w {
			w[i] = kernel.F32ToBF16((r.Float32()*2 - 1) * sc)
		}
		l, err = kernel.NewBF16(out, in, w)
	default:
		w := make([]float32, out*in)
		for i := range w {
			w[i] = (r.Float32()*2 - 1) * sc
		}
		l, err = kernel.NewF32(out, in, w)
	}
	if err != nil {
		panic(err)
	}
	return l
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// syntheticTarget builds the benchmark model with random weights; it also returns the parameter count and the
// weight bytes a decode step reads (every matrix once; the tied embedding once, as the LM head).
func syntheticTarget(format string, threads int) (*Target, int, int) {
	a := syntheticArch()
	r := rand.New(rand.NewPCG(1, 2))
	params, bytes := 0, 0
	lin := func(out, in int) *kernel.Linear {
		params += out * in
		l := randLinear(r, format, out, in)
		bytes += l.Bytes()
		return l
	}
	pool := kernel.NewPool(threads)
	lw := func(out, in int) *weight {
		l := lin(out, in)
		l.Pool = pool
		return &weight{lin: l}
	}
	vec := func(v []float32) *weight { return &weight{vec: v} }
	m := &model.Target[*weight]{Arch: a, Rope: &weight{rope: vecmath.NewRope(a.RotaryDims, a.RopeTheta)}}
	m.Embed = lw(a.Vocab, a.Hidden)
	m.LMHead = m.Embed
	m.FinalNorm = vec(ones(a.Hidden))
	H, C, Dv := a.Hidden, a.ConvDim(), a.ValueHeads*a.ValueDim
	for i := range a.Layers {
		ly := model.Layer[*weight]{Kind: a.Kinds[i], InNorm: vec(ones(H)), PostNorm: vec(ones(H))}
		if ly.Kind == ports.LayerAttention {
			ly.Attn = &model.Attention[*weight]{Q: lw(2*a.Heads*a.HeadDim, H), K: lw(a.KVHeads*a.HeadDim, H), V: lw(a.KVHeads*a.HeadDim, H),
				O: lw(H, a.Heads*a.HeadDim), QNorm: vec(ones(a.HeadDim)), KNorm: vec(ones(a.HeadDim))}
		} else {
			conv, negA := make([]float32, C*a.ConvKernel), make([]float32, a.ValueHeads)
			for j := range conv {
				conv[j] = r.Float32() - 0.5
			}
			for j := range negA {
				negA[j] = -r.Float32()
			}
			ly.GDN = &model.DeltaNet[*weight]{QKV: lw(C, H), Z: lw(Dv, H), B: lw(a.ValueHeads, H), A: lw(a.ValueHeads, H), Out: lw(H, Dv),
				Conv: &weight{vec: conv, taps: convTaps(conv, C, a.ConvKernel)}, NegA: vec(negA), DtBias: vec(ones(a.ValueHeads)), Norm: vec(ones(a.ValueDim)),
				KeyHeads: a.KeyHeads, ValueHeads: a.ValueHeads, KeyDim: a.KeyDim, ValueDim: a.ValueDim, ConvKernel: a.ConvKernel}
		}
		ly.MLP = &model.FFN[*weight]{Gate: lw(a.Intermediate, H), Up: lw(a.Intermediate, H), Down: lw(H, a.Intermediate), Inter: a.Intermediate}
		m.Layers = append(m.Layers, ly)
	}
	return &Target{m: m, pool: pool, cfg: &hfmodel.TextConfig{ModelType: "synthetic"}, info: ports.ModelInfo{
		Architecture: "synthetic", VocabSize: a.Vocab, HiddenSize: a.Hidden, ContextLength: a.ContextLength,
		LayerKinds: append([]ports.LayerKind(nil), a.Kinds...)}}, params, bytes
}

// BenchmarkTarget measures a decode step (1 token), a 16-token verify step (with tape) after a 64-token prefix
// and a 512-token prefill, on the synthetic ~100M hybrid in f32, bf16 and 4-bit. Each iteration restores the prefix state first
// (a ~1.6 MB copy, negligible next to the weights). GB/s is the weight bytes a step reads per second and %bw
// that against the machine's read bandwidth; GFLOP/s counts 2·params per token and %peak is that against the
// f32 FMA peak (both limits measured once at the start of the run, machine.MeasureLimits).
//
//	go test -run '^$' -bench Target -benchtime 10x ./adapters/cpu
func BenchmarkTarget(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 100M-parameter model")
	}
	lim := machine.MeasureLimits(workers.New(0), 512<<20, 5)
	for _, format := range []string{"f32", "bf16", "q4"} {
		tg, params, wbytes := syntheticTarget(format, 0)
		prefix := make([]ports.Token, 64)
		for i := range prefix {
			prefix[i] = ports.Token(i * 37 % tg.m.Arch.Vocab)
		}
		for _, T := range []int{1, 16} {
			name := "decode"
			if T > 1 {
				name = fmt.Sprintf("verify%d", T)
			}
			b.Run(fmt.Sprintf("%s/%s", format, name), func(b *testing.B) {
				ps, err := tg.NewSession(b.Context(), nil)
				if err != nil {
					b.Fatal(err)
				}
				s := ps.(*Session)
				if _, err := s.Forward(b.Context(), prefix, ports.ForwardOptions{Rows: 1}); err != nil {
					b.Fatal(err)
				}
				snap, err := s.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				block := prefix[:T]
				opts := ports.ForwardOptions{RecordTape: T > 1}
				for b.Loop() {
					if err := s.Restore(snap); err != nil {
						b.Fatal(err)
					}
					if err := s.TrimKV(len(prefix)); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Forward(b.Context(), block, opts); err != nil {
						b.Fatal(err)
					}
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				gbs, gf := float64(wbytes)/sec/1e9, 2*float64(params*T)/sec/1e9
				b.ReportMetric(float64(T)/sec, "tok/s")
				b.ReportMetric(float64(params)/1e6, "Mparams")
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(100*gbs/lim.ReadGBs, "%bw")
				b.ReportMetric(gf, "GFLOP/s")
				b.ReportMetric(100*gf/lim.PeakGFlops, "%peak")
			})
		}
		b.Run(format+"/prefill512", func(b *testing.B) {
			prompt := make([]ports.Token, 512)
			for i := range prompt {
				prompt[i] = ports.Token(i * 101 % tg.m.Arch.Vocab)
			}
			for b.Loop() {
				ps, err := tg.NewSession(b.Context(), nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ps.Forward(b.Context(), prompt, ports.ForwardOptions{Rows: 1}); err != nil {
					b.Fatal(err)
				}
				_ = ps.Close()
			}
			b.ReportMetric(float64(len(prompt))/(b.Elapsed().Seconds()/float64(b.N)), "tok/s")
		})
	}
}
