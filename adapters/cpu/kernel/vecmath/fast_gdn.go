package vecmath

// GDNStepFast is one state row's step of the Gated DeltaNet recurrence in the fast mode: S = α·src
// (elementwise, as ScaleInto), the memory read m = S·k, the innovation δ = β·(v − m), the update
// S += δ·k (each product rounded before the add, as AddScaled) and the read-out o = S·q. The state updates
// are the exact mode's elementwise operations (so tape replay rebuilds the same state); the two dot products
// use fastDot's order instead of the exact mode's, so they vectorize in one pass with the update. S may be
// src.
func GDNStepFast(S, src, k, q []float32, alpha, beta, v float32) (o, d float32) {
	n := len(S)
	src, k, q = src[:n], k[:n], q[:n]
	if useAVX2 && n > 0 && n%32 == 0 {
		var out [2]float32
		if useAVX512 {
			gdnStepAVX512(&S[0], &src[0], &k[0], &q[0], n, alpha, beta, v, &out)
		} else {
			gdnStepAVX2(&S[0], &src[0], &k[0], &q[0], n, alpha, beta, v, &out)
		}
		return out[0], out[1]
	}
	var acc [32]float32
	for j := range S {
		s := src[j] * alpha
		S[j] = s
		acc[j%32] += float32(s * k[j])
	}
	d = beta * (v - reduce32(&acc))
	acc = [32]float32{}
	for j := range S {
		s := S[j] + float32(d*k[j])
		S[j] = s
		acc[j%32] += float32(s * q[j])
	}
	return reduce32(&acc), d
}

// GDNStep4Fast is GDNStepFast on four state rows at once, with the same bits: rows r < 4 of n values at
// S[r·stride:] and src[r·stride:] (S may be src), with v[r]. out[r] gets row r's o, out[4+r] its δ. On
// AVX-512 one kernel runs the four rows' steps side by side, so their dependent reductions overlap (the rows of
// a Gated DeltaNet head are independent) and one call replaces four; on AVX2, two calls of two rows each.
func GDNStep4Fast(S, src, k, q []float32, n, stride int, alpha, beta float32, v []float32) (out [8]float32) {
	S, src, k, q, v = S[:3*stride+n], src[:3*stride+n], k[:n], q[:n], v[:4]
	if useAVX512 && n > 0 && n%32 == 0 && stride >= n {
		gdnStep4AVX512(&S[0], &src[0], &k[0], &q[0], n, stride, alpha, beta, &v[0], &out)
		return out
	}
	if useAVX2 && n > 0 && n%32 == 0 && stride >= n {
		var a, b [4]float32
		gdnStep2AVX2(&S[0], &src[0], &k[0], &q[0], n, stride, alpha, beta, &v[0], &a)
		gdnStep2AVX2(&S[2*stride], &src[2*stride], &k[0], &q[0], n, stride, alpha, beta, &v[2], &b)
		return [8]float32{a[0], a[1], b[0], b[1], a[2], a[3], b[2], b[3]}
	}
	for r := range 4 {
		out[r], out[4+r] = GDNStepFast(S[r*stride:r*stride+n], src[r*stride:r*stride+n], k, q, alpha, beta, v[r])
	}
	return out
}

// GDNRunRows is how many state rows of n values one GDNRunFast call runs: 4 of 64 values, 2 of 128, where the
// CPU has AVX-512; 0 elsewhere (the caller then steps with GDNStep4Fast).
func GDNRunRows(n int) int {
	switch {
	case !useAVX512:
		return 0
	case n == 64:
		return 4
	case n == 128:
		return 2
	}
	return 0
}

// GDNRunFast runs T ≥ 1 steps of GDNStepFast on GDNRunRows(n) state rows of n values, n apart (row r at
// S[r·n:] and src[r·n:]; S may be src), with the same bits: the rows stay in registers from the first step to
// the last instead of being loaded and stored twice a step, and one call replaces T of GDNStep4Fast's. Step t
// reads k[t·kv:][:n], q[t·kv:][:n], the rows' values v[t·kv:], alpha[t·ab] and beta[t·ab], and writes the rows'
// read-outs to o[t·os:] and, where d is not nil, their innovations to d[t·ds:]. n must have GDNRunRows(n) > 0.
func GDNRunFast(S, src, k, q, v []float32, kv int, alpha, beta []float32, ab int, o []float32, os int, d []float32, ds, n, T int) {
	rows := GDNRunRows(n)
	if rows == 0 || T < 1 {
		panic("vecmath: GDNRunFast without a kernel for these rows, or no step")
	}
	last := T - 1
	_, _ = S[rows*n-1], src[rows*n-1]
	_, _, _ = k[last*kv+n-1], q[last*kv+n-1], v[last*kv+rows-1]
	_, _, _ = alpha[last*ab], beta[last*ab], o[last*os+rows-1]
	var scratch [4]float32
	dp, dstride := &scratch[0], 0
	if d != nil {
		_ = d[last*ds+rows-1]
		dp, dstride = &d[0], ds
	}
	if n == 64 {
		gdnRun4x64AVX512(&S[0], &src[0], &k[0], &q[0], &v[0], &alpha[0], &beta[0], &o[0], dp, T, kv, ab, os, dstride)
		return
	}
	gdnRun2x128AVX512(&S[0], &src[0], &k[0], &q[0], &v[0], &alpha[0], &beta[0], &o[0], dp, T, kv, ab, os, dstride)
}

// reduce32 sums fastDot's 32 lanes: (l, l+8) and (l+16, l+24), then those two, then by halving (i, i+4),
// (i, i+2) and lanes 0 and 1.
func reduce32(a *[32]float32) float32 {
	var v [8]float32
	for l := range v {
		v[l] = float32(a[l]+a[l+8]) + float32(a[l+16]+a[l+24])
	}
	for n := 4; n >= 1; n /= 2 {
		for i := range n {
			v[i] += v[i+n]
		}
	}
	return v[0]
}
