package serve

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.SystemReporter = (*Serve)(nil)

// System reports the version, uptime, the loaded model and, for scope.All, the memory figures
// (ports.SystemReporter). It reads counters only: it never waits for the engine or the queue.
func (s *Serve) System(_ context.Context, scope ports.SystemScope) (ports.SystemReport, error) {
	now := s.clock.Now()
	r := ports.SystemReport{Version: s.cfg.Version, Started: s.started, Uptime: now.Sub(s.started), Models: []ports.SystemModel{}}
	for _, c := range s.Models() {
		r.Models = append(r.Models, ports.SystemModel{Card: c})
	}
	if !scope.All {
		return r, nil
	}
	rss, peak := processMemory()
	m := &ports.SystemMemory{ProcessRSS: rss, ProcessPeakRSS: peak, Machine: physicalMemory(), PrefixCache: s.cfg.PrefixCacheBytes}
	if l := s.engine.Load(); l != nil {
		m.Budget, m.Reserved = l.budget.Total(), l.budget.Used()
		if l.DeviceMemory != nil {
			d, err := l.DeviceMemory()
			if err != nil {
				return ports.SystemReport{}, fmt.Errorf("system: device memory: %w", err)
			}
			m.Device = &d
		}
	}
	r.Memory = m
	return r, nil
}
