// Package verify is the higgs-verify harness: generate, lossless, parity, logits, bench (with costs and
// concurrent clients), synth, export-gguf and tokenize. Every command that generates runs the generation
// pipeline higgsd runs (app/generation's Engine.Plan and Engine.Run, through decode in verify.go), adding only
// its traces and measurements, so bench times the server's own path.
package verify
