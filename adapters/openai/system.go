package openai

import (
	"net/http"

	"github.com/higgs-go/higgs/adapters/httpapi"
	"github.com/higgs-go/higgs/ports"
)

// System is GET /v1/system's body. Memory is present for the operator (--admin-key) and on a server without
// keys; a tenant key sees the rest, which tells it nothing of other tenants' load.
type System struct {
	Object  string `json:"object"`
	Version string `json:"version"`
	// Started is the server's start in Unix seconds; UptimeSeconds how long it has run.
	Started       int64         `json:"started"`
	UptimeSeconds float64       `json:"uptime_seconds"`
	Memory        *SystemMemory `json:"memory,omitempty"`
	// Models are the loaded models, each as GET /v1/models describes it.
	Models []Model `json:"models"`
}

// SystemMemory is the memory section of GET /v1/system, in bytes; a figure the platform does not give is 0.
type SystemMemory struct {
	ProcessRSSBytes     int64 `json:"process_rss_bytes"`
	ProcessPeakRSSBytes int64 `json:"process_peak_rss_bytes"`
	MachineBytes        int64 `json:"machine_bytes"`
	BudgetBytes         int64 `json:"budget_bytes"`
	ReservedBytes       int64 `json:"reserved_bytes"`
	PrefixCacheBytes    int64 `json:"prefix_cache_bytes"`
	// Device is the accelerator's allocator (absent on the CPU backend).
	Device *DeviceMemory `json:"device,omitempty"`
}

// DeviceMemory is an accelerator allocator's figures for the whole process.
type DeviceMemory struct {
	Backend     string `json:"backend"`
	ActiveBytes int64  `json:"active_bytes"`
	PeakBytes   int64  `json:"peak_bytes"`
	CacheBytes  int64  `json:"cache_bytes"`
}

// SystemOf is the wire form of r.
func SystemOf(r ports.SystemReport) System {
	out := System{Object: "system", Version: r.Version, Started: r.Started.Unix(), UptimeSeconds: r.Uptime.Seconds(),
		Models: make([]Model, 0, len(r.Models))}
	for _, m := range r.Models {
		out.Models = append(out.Models, ModelOf(m.Card))
	}
	if m := r.Memory; m != nil {
		out.Memory = &SystemMemory{ProcessRSSBytes: m.ProcessRSS, ProcessPeakRSSBytes: m.ProcessPeakRSS, MachineBytes: m.Machine,
			BudgetBytes: m.Budget, ReservedBytes: m.Reserved, PrefixCacheBytes: m.PrefixCache}
		if d := m.Device; d != nil {
			out.Memory.Device = &DeviceMemory{Backend: d.Backend, ActiveBytes: d.Active, PeakBytes: d.Peak, CacheBytes: d.Cache}
		}
	}
	return out
}

// system answers GET /v1/system: with keys any key may ask, and the memory figures are the operator's (and
// the one user's of a server without keys).
func (s *Server) system(w http.ResponseWriter, r *http.Request) {
	if s.opts.System == nil {
		writeError(w, &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
			Message: "this server has no system report"})
		return
	}
	all := !s.opts.Keys.Required() || httpapi.IdentityOf(r.Context()).Operator
	rep, err := s.opts.System.System(r.Context(), ports.SystemScope{All: all})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, SystemOf(rep))
}
