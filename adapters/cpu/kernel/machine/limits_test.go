package machine

import (
	"testing"

	"github.com/higgs-go/higgs/adapters/cpu/kernel/workers"
)

// BenchmarkLimits reports the measured ceilings themselves.
//
//	go test -run '^$' -bench Limits ./adapters/cpu/kernel/machine
func BenchmarkLimits(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates 512 MiB")
	}
	var lim Limits
	for b.Loop() {
		lim = MeasureLimits(workers.New(0), 512<<20, 3)
	}
	b.ReportMetric(lim.ReadGBs, "readGB/s")
	b.ReportMetric(lim.PeakGFlops, "peakGFLOP/s")
}
