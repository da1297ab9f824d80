// Package speculative is the decoding loop of higgs: prefill, then rounds of draft → verify → accept →
// roll back → commit → emit (docs/model-math.md#the-generation-loop), for plain autoregressive decoding (block size
// 1) and DFlash block drafts. It is pure Go over the ports: time comes from a ports.Clock, randomness from a
// ports.Rand, and it never logs (it returns Stats for the caller to log).
//
// # Acceptance
//
// Greedy (temperature 0): the longest prefix of drafts equal to the target's argmax, plus the target's
// token after it (bonus or correction), so the output equals greedy plain decoding token for token.
// Temperature > 0, Config.Verify chooses between two exact rules:
//
//   - VerifyResidual, lossless speculative sampling: a draft d with distribution q (Proposal.Dists) is
//     accepted with probability min(1, p(d)/q(d)); on rejection the correction is drawn from max(0, p−q)
//     renormalised (by exact rejection sampling through ports.Distribution); point-mass drafts (Dists nil,
//     as DFlash drafts) are accepted with probability p(d) and corrected with Distribution.Sample(u, d).
//     Its numbers come from the Rand's stream in the order the rounds use them.
//   - VerifyMatch, sample-and-match: the target's token at sequence position j is p_j.Sample(u_j) with u_j =
//     ports.PositionRand.Uniform(j), the same number plain decoding uses at j; a draft is accepted iff it
//     equals that token and the first mismatch is replaced by it. Every committed token is therefore the
//     target's own sample with its position's number: the output has the target's distribution and is the
//     same for one seed whatever the block sizes, the policy's choices, the drafts or the timing (given a
//     backend whose per-position distributions do not depend on the block, as the CPU backend's do).
//
// A draft session with the ports.SamplingDrafter ability (DFlash2's selector) is asked at temperature > 0 to
// draw its proposals itself, from the decoder's ports.Rand, and reports the distribution of each (used by
// VerifyResidual; VerifyMatch needs no proposal distribution).
//
// # Rollback
//
// After a round that commits n of the bs verified positions (n < bs), the session is brought back to
// exactly the state of feeding only the committed tokens:
//
//  1. Attention-only models roll back by TrimKV alone. A model is attention-only when Config.LayerKinds is
//     set and holds no ports.LayerRecurrent, or, when Config.LayerKinds is nil, when Snapshot() on the
//     fresh session fails with an error wrapping errors.ErrUnsupported. Any other Snapshot error fails
//     Generate; a successful Snapshot means "has recurrent state" (so backends of attention-only models
//     should either return errors.ErrUnsupported from Snapshot or be given Config.LayerKinds, or they pay
//     for needless snapshots and recomputes).
//  2. Recurrent models: tape replay (TrimKV(pre+n), then ReplayTape(tape, n)) needs the session to
//     implement ports.TapeReplayer and Forward to return a tape when asked; snapshot + recompute
//     (Snapshot before verify; TrimKV(pre), Restore, Forward of the n committed tokens) needs Snapshot and
//     Restore. RollbackReplay and RollbackRecompute force one (an error wrapping errors.ErrUnsupported when
//     it is unavailable). RollbackAuto uses what is available; with both, it records a tape and takes a
//     snapshot until the backend has shown it returns tapes, measures each strategy at least once, then
//     picks per round the one with the lower expected cost (replay: E[replay]·P(partial); recompute:
//     E[snapshot] + E[recompute]·P(partial); moving averages of clock-measured durations) and re-measures
//     the other every 32 rollbacks.
//  3. A round that commits every verified position keeps the verify state (RollbackNone). Rounds cut by a
//     stop token or the token budget still roll back to what was committed.
//
// # Drafter context
//
// The drafter receives the target taps of committed positions: the prefill's taps on the first drafting
// round, then Taps.Slice(n) of each verify (or of the recompute forward). When the adaptive policy runs
// plain rounds (block 1, no drafting call), their taps are kept (detached) and fed before the next draft
// by context-only Draft calls with bs = 1, so DraftSession implementations must accept bs = 1 (append the
// context, draft nothing; the CPU drafter only queues such rows and projects them all with the next drafting
// call). A drafter drafts exactly the bs slots it is asked for, below or above its configured block size, as
// the drafter's authors run it: the adaptive policy prices a short block's draft as the cheaper call it is,
// and keeps acceptance per block size, since a block's slots are drafted beside exactly its own masks.
package speculative
