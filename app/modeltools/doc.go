// Package modeltools holds higgs-verify's commands that work on model files rather than generate: synth
// (random synthetic targets and DFlash drafters), export-gguf (a dense Qwen3 checkpoint as GGUF for the
// llama.cpp side-by-side) and tokenize. Their errors wrap verify.ErrBadInput like the harness's.
package modeltools
