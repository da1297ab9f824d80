package mlx

import (
	"fmt"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/ports"
)

// DeviceMemory reads MLX's allocator: the bytes live arrays hold, the most they have held, and the freed
// buffers kept for reuse. The allocator is the process's, so the figures cover every model MLX holds, not
// this target alone. Safe for concurrent use (it runs on the MLX thread).
func (t *Target) DeviceMemory() (ports.DeviceMemory, error) {
	m := ports.DeviceMemory{Backend: "mlx"}
	err := t.rt.Do(func() error {
		var active, peak, cache uintptr
		for _, read := range []struct {
			name string
			rc   int32
		}{{"active", mlxc.GetActiveMemory(&active)}, {"peak", mlxc.GetPeakMemory(&peak)}, {"cache", mlxc.GetCacheMemory(&cache)}} {
			if err := t.rt.Check(read.rc); err != nil {
				return fmt.Errorf("mlx %s memory: %w", read.name, err)
			}
		}
		m.Active, m.Peak, m.Cache = int64(active), int64(peak), int64(cache)
		return nil
	})
	return m, err
}
