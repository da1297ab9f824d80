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
// Why the model structure is duplicated from adapters/cpu: the CPU backend is written directly on its own
// deterministic kernels (fused loops over Go slices with a fixed reduction order that make verify and
// token-by-token decoding bit-identical), not on a tensor interface; MLX is a lazy graph library where the
// same layer is a sequence of op calls on opaque handles. A shared adapters/tensor interface would force
// either the CPU path into op-at-a-time allocation (losing its fused kernels and exactness guarantees) or
// this backend into Go-side loops (losing MLX's fusion and device residency). The duplication is the layer
// structs and wiring (forward.go, model.go, load.go and the drafter's layers: about 1,000 lines); what a
// checkpoint means is shared (hfmodel: configs, the resolved Arch, canonical names, quantization and
// zero-centred-norm rules; safetensors; quant), the drafter's config rules come from adapters/cpu/dflash's
// loader, and parity tests against the CPU backend on the same checkpoints (every transformers golden, random
// dense/hybrid/quantized fixtures, DFlash traces) keep the two in step.
//
// Numerics: float32 by default (parity with the CPU reference). LoadOptions.BFloat16 is experimental: bf16
// weights and activations with the GDN recurrence in float32.
package mlx
