// Package app holds the use cases (serve, verify) and the wire provider sets that assemble adapters, domain and
// ports into the two binaries.
package app

import (
	"errors"
	"fmt"

	"github.com/higgs-go/higgs/ports"
)

// ErrNoBackend is returned while no model backend is built into this binary.
var ErrNoBackend = errors.New("no model backend is available in this build yet")

// ModelConfig names the model and drafter to load and the backend to run them on.
type ModelConfig struct {
	Model   string
	Draft   string
	Backend string
}

// ProvideTarget loads the target model named by cfg.
func ProvideTarget(cfg ModelConfig) (ports.Target, error) {
	return nil, fmt.Errorf("load %q on backend %q: %w", cfg.Model, cfg.Backend, ErrNoBackend)
}
