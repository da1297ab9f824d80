// Package mlx is the MLX backend: Qwen3, Qwen3-Next and Qwen3.5 targets whose weights and state live in MLX
// arrays, driven through mlx-c loaded at run time with purego (no cgo). libmlxc is found through
// $HIGGS_MLX_LIB, then the platform's usual places (Homebrew's lib folder on macOS, the loader path on
// Linux); with no usable library every entry point returns one error wrapping errors.ErrUnsupported
// (ErrUnavailable) and nothing else changes.
//
// All MLX calls run on one goroutine locked to an OS thread (internal/mlxc.Runtime): MLX streams and the
// error slot are per thread, and MLX's error handler is replaced before the first call so a failing op
// becomes a Go error instead of exiting the process. Every array has an explicit owner and is freed
// explicitly; a forward pass builds one lazy graph and evaluates it once, reading back only the greedy token
// ids (plus logits when distributions or raw logits are requested, and taps only when the caller reads
// them).
//
// Getting libmlxc: on macOS, Homebrew's mlx-c (`brew install mlx-c`, found in /opt/homebrew/lib or
// /usr/local/lib). On Linux, build mlx-c (it pins its MLX version) with CMake against an installed MLX or
// letting it fetch MLX, outside this repository, and point HIGGS_MLX_LIB at the resulting libmlxc.so (a
// libmlx.so beside it is loaded first), or put both on the loader path. This build expects mlx-c 0.6.0 /
// MLX 0.31.2 and refuses another MLX version with a message saying so. On MLX's CPU backend with OpenBLAS,
// set OPENBLAS_NUM_THREADS=1: MLX runs its own threads and OpenBLAS's compete with them (2× slower here).
//
// The function table in internal/mlxc is generated from the pinned headers:
// MLXC_SRC=/path/to/mlx-c go generate ./adapters/mlx/internal/mlxc (a test checks it is current when
// MLXC_SRC is set).
//
// The model structure is not here: every architecture (the load sequence, the layer loop, the attention,
// Gated DeltaNet and MoE blocks, the DFlash drafter's passes) is written once in adapters/model, over the
// block-level interfaces that internal/ops implements (the loader, the block ops, and a pass's view of the KV
// caches, the recurrent state and its tape as MLX arrays), each pass on one lazy graph (internal/graph: the
// op wrappers that record the first error). What stays here is the sessions that own that state: the weight
// arenas, device residency, chunked evaluation of long blocks, snapshots, tapes and prefixes, taps, the
// drafter's sessions and the ports; `unsafe` is confined to internal/mlxc. Parity tests against the CPU backend on the same checkpoints (every transformers golden,
// random dense/hybrid/quantized fixtures, DFlash traces) keep the two backends in step; they are the only
// place this package touches adapters/cpu (as the test oracle).
//
// A target may also hold one stage of a model split across processes (LoadStage; stage.go, stagebatch.go,
// worker.go): package pipeline joins the group and runs the processes, and internal/ring is the wire protocol
// both speak.
//
// Numerics: float32 by default (parity with the CPU reference). LoadOptions.BFloat16 is experimental: bf16
// weights and activations with the GDN recurrence in float32.
package mlx
