// Package abilities holds no code: its test keeps ARCHITECTURE.md's tables of optional abilities (the small
// ports interfaces found by type assertion) true of portfake, the CPU backend, the MLX backend and the other
// ports' implementations.
package abilities
