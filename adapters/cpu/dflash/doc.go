// Package dflash is the DFlash block-diffusion drafter on the deterministic CPU backend (MODEL-REFERENCE §5):
// it loads a drafter checkpoint in the format the DFlash authors publish, checks it against the target it will
// draft for, and implements ports.Drafter / ports.DraftSession.
//
// The drafter borrows the target's token embedding and LM head (it has neither of its own) and consumes the
// target's tapped hidden states as context. One Draft call appends the new context rows to the drafter's KV
// cache (context rows are projected by fc + hidden_norm and are not passed through input_layernorm), embeds the
// noise block [anchor, mask×(bs−1)] at positions L..L+bs−1, runs the layers with non-causal attention from the
// block's queries to [cached context K/V ; block K/V], and takes the argmax of the target's LM head on block
// rows 1..bs−1: the mask at slot i predicts the token at slot i (no shift).
//
// Every matrix product goes through kernel.Linear with the kernel package's fixed partitioning, and every
// reduction here runs in index order, so drafts are bit-identical for any worker count.
package dflash
