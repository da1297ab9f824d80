// Package batch is continuous batching at the port boundary: a Scheduler gathers the target forwards and the
// drafts of every active sequence into rounds, so that one ports.BatchForwarder call verifies every pending
// block (ragged: each sequence at its own position, with its own block size, plain decoding as blocks of one,
// new requests' prefill chunks beside them) and one ports.BatchDrafter call drafts for every sequence that
// drafts. Each sequence keeps its own decoder (domain/speculative.Decoder.Generate, unchanged, on its own
// goroutine) and calls the scheduler through a Member's Forward and Draft in place of its sessions'.
//
// A round runs when every active member has submitted a call, or once Config.MaxWait has passed (measured on
// the clock) since the scheduler became free with a call pending, so a member that is busy elsewhere (emitting
// to a slow client, exporting a prefix) never stalls the others for longer than that. Pending drafts run
// before pending forwards: the members that drafted then submit their verifies, which join the forwards
// already waiting, so a round's verify is one forward for the whole batch.
//
// Because the batched ports' contract makes each item bit-identical to its solo call, every sequence's output
// is what it would be alone: greedy token for token, seeded sampling identical. Targets and drafters without
// the batched abilities run a round's items one after another, which is still correct (the sequences then
// share the engine round by round). Cancellation and item errors stay per member: a cancelled call still
// pending leaves the round at once; one already in a running round returns when the round ends (its session
// is in use until then).
//
// Budget is the memory admission policy: bytes of KV cache and recurrent state reserved before a request
// joins, first come first served, waiting while they do not fit and refused when they never can.
//
// The package is pure domain code: time comes from a ports.Clock with a Timer ability, nothing is logged, and
// it imports only the standard library and ports.
package batch
