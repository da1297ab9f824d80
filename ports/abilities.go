package ports

import "context"

// HostTaps is an optional Taps ability: the tapped hidden states copied to (or already in) host memory, so
// a consumer on another device, or a reference check, can read them. data is row-major [rows, width] with
// width = len(tapLayers)·HiddenSize; it is read-only and stays valid as long as the taps do.
type HostTaps interface {
	Host() (data []float32, rows, width int, err error)
}

// SamplingDrafter is an optional DraftSession ability for temperature > 0: Draft whose proposals are drawn
// from the drafter's own distributions at that temperature, with uniforms taken from rnd (so a seeded
// generation stays reproducible), each reported in Proposal.Dists. Verification against them is the usual
// lossless speculative sampling (accept with min(1, p/q), correct from max(0, p−q)). A drafter without
// distributions of its own answers like Draft (point masses, Dists nil).
type SamplingDrafter interface {
	DraftSampled(ctx context.Context, anchor Token, newCtx Taps, bs int, temperature float64, rnd Rand) (Proposal, error)
}
