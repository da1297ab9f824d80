package cpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/ports"
)

// BenchmarkGocoder times, on the bundled gocoder target and drafter with the fast kernels and 2 threads, what
// a speculative round is made of: a 1-row decode, verifies of 8 and 16 rows (taps and tape recorded, as the
// decoder asks) at a 128-token context, and a drafter pass of block 16. Run beside -cpuprofile it gives the
// split of a verify by part (docs/performance.md):
//
//	go test -run '^$' -bench Gocoder -benchtime 200x -cpuprofile /tmp/cpu.out ./adapters/cpu
func BenchmarkGocoder(b *testing.B) {
	root := filepath.Join("..", "..", "models", "gocoder")
	if _, err := os.Stat(filepath.Join(root, "target", "model.safetensors")); err != nil {
		b.Skipf("the bundled gocoder model is not here: %v", err)
	}
	ctx := b.Context()
	target, err := Load(ctx, filepath.Join(root, "target"), LoadOptions{Threads: benchThreads(), Kernels: kernel.ModeFast})
	require.NoError(b, err)
	defer target.Close()
	d, err := LoadDrafter(ctx, filepath.Join(root, "drafter"), target, DrafterOptions{})
	require.NoError(b, err)
	defer d.Close()
	ps, err := target.NewSession(ctx, d.TapLayers())
	require.NoError(b, err)
	defer ps.Close()
	prefix := make([]ports.Token, 128+16)
	for i := range prefix {
		prefix[i] = ports.Token(100 + i*37%3000)
	}
	fr, err := ps.Forward(ctx, prefix[:128], ports.ForwardOptions{Taps: true, Rows: 1})
	require.NoError(b, err)
	snap, err := ps.Snapshot()
	require.NoError(b, err)
	for _, T := range []int{1, 8, 16} {
		b.Run(fmt.Sprintf("forward%d", T), func(b *testing.B) {
			opts := ports.ForwardOptions{Taps: true, RecordTape: T > 1, Rows: T}
			for b.Loop() {
				if _, err := ps.Forward(ctx, prefix[128:128+T], opts); err != nil {
					b.Fatal(err)
				}
				if err := ps.TrimKV(128); err != nil {
					b.Fatal(err)
				}
				if err := ps.Restore(snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("draft16", func(b *testing.B) {
		ds, err := d.NewSession(ctx)
		require.NoError(b, err)
		defer ds.Close()
		_, err = ds.Draft(ctx, fr.Greedy[0], fr.Taps, 1)
		require.NoError(b, err)
		n := ds.Len()
		for b.Loop() {
			if _, err := ds.Draft(ctx, fr.Greedy[0], nil, 16); err != nil {
				b.Fatal(err)
			}
			if err := ds.Crop(n); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchThreads is the worker count of BenchmarkGocoder: HIGGS_BENCH_THREADS, 2 by default.
func benchThreads() int {
	if n, err := strconv.Atoi(os.Getenv("HIGGS_BENCH_THREADS")); err == nil && n > 0 {
		return n
	}
	return 2
}
