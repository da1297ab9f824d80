// Package tokenizer is a pure-Go reading of Hugging Face tokenizer.json files for byte-level BPE models (the
// GPT-2 / Qwen2 / Qwen3 family). It reproduces the `tokenizers` library's encode pipeline — added tokens split
// out first, then normalizer, pre-tokenizer, BPE model and post-processor — and its ByteLevel decoder, so ids
// match Hugging Face exactly (checked against goldens made with the Python `tokenizers` library).
//
// Components it does not implement are refused at load time with an error naming them (ErrUnsupported), never
// approximated.
//
// Invalid UTF-8: a Go string may hold bytes that are not UTF-8, which a Rust string cannot. Encode replaces
// each maximal ill-formed subsequence with U+FFFD before anything else — exactly what Python's
// bytes.decode("utf-8", errors="replace") does — so Encode(s) equals Hugging Face encoding of that decoded
// string. Decode produces invalid sequences only where the ids themselves spell broken UTF-8, and then it
// substitutes U+FFFD the way Rust's String::from_utf8_lossy does, as Hugging Face's ByteLevel decoder does.
package tokenizer
