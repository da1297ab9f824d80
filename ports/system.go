package ports

import (
	"context"
	"time"
)

// SystemReporter is the inbound port behind GET /v1/system: the server's version, uptime, memory and the
// models it serves. Implementations are safe for concurrent use; System does not wait for the engine (a
// server still loading answers with no models).
type SystemReporter interface {
	// System reports the state now. scope.All (the operator, or the one user of a server without keys)
	// includes Memory; a tenant's report leaves it nil, since the process's and the device's memory move
	// with every other tenant's requests.
	System(ctx context.Context, scope SystemScope) (SystemReport, error)
}

// SystemScope says how much of the report a caller sees.
type SystemScope struct {
	// All includes the memory figures (SystemReport.Memory).
	All bool
}

// SystemReport is what GET /v1/system answers.
type SystemReport struct {
	// Version describes the build (module version, VCS revision, Go version and platform).
	Version string
	// Started is when the server started; Uptime how long ago that was.
	Started time.Time
	Uptime  time.Duration
	// Memory is nil unless SystemScope.All asked for it.
	Memory *SystemMemory
	// Models are the loaded models (none while loading).
	Models []SystemModel
}

// SystemMemory is the process's, the machine's and the admission budget's memory, in bytes; 0 where the
// platform does not say.
type SystemMemory struct {
	// ProcessRSS is the process's resident set now (Linux: /proc/self/status VmRSS; 0 elsewhere);
	// ProcessPeakRSS its largest resident set so far (getrusage's ru_maxrss).
	ProcessRSS     int64
	ProcessPeakRSS int64
	// Machine is the memory this process may use: the machine's RAM, or a container's limit where smaller.
	Machine int64
	// Budget is memory admission's budget (--memory-budget-bytes, or the default from Machine); Reserved what
	// the running requests hold of it now. Both 0 while no model is loaded.
	Budget   int64
	Reserved int64
	// PrefixCache is the prefix cache's budget (0: off).
	PrefixCache int64
	// Device is the accelerator's allocator (nil on the CPU backend).
	Device *DeviceMemory
}

// DeviceMemory is an accelerator allocator's figures, in bytes, for the whole process (MLX keeps one
// allocator for every model it holds).
type DeviceMemory struct {
	// Backend names the accelerator's backend ("mlx").
	Backend string
	// Active is held by live arrays; Peak the most Active has been since the process started; Cache freed
	// buffers the allocator keeps for reuse.
	Active int64
	Peak   int64
	Cache  int64
}

// SystemModel is one loaded model: its card (backend, kernels, drafter, speculation, context length) as
// GET /v1/models describes it.
type SystemModel struct {
	Card ModelCard
}
