// Package serve is the serving use case. Serve implements ports.Generator and ports.TokenCounter, and its hub
// ports.EventSource (the live view). Around the one generation pipeline (app/generation) it adds what is
// about text and load: chat templates, client-written content encoded as plain text, stop strings, the
// <think> split, the bounded queue, the batch scheduler's setup and memory admission at the price the
// backends set (ports.MemoryPricer; an estimate from ModelInfo without it).
package serve
