// Package generation is the one generation pipeline that higgsd and every higgs-verify command that
// generates go through: Engine.Plan checks a request's knobs (prompt ids, max_tokens, block size, sampling,
// stop ids) against the loaded models, each with one message naming the parameter at fault, and builds the
// decoder's configuration; Engine.Run opens the sessions, restores the longest cached prefix, joins the
// batch's rounds, applies the output constraint, decodes, and caches what the generation computed.
//
// Serving adds text (templates, stop strings, reasoning split), queueing and memory admission around it;
// the harness adds its traces and measurements. Neither implements any step of the pipeline itself, so
// `higgs-verify bench` times exactly what higgsd runs.
package generation
