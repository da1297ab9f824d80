// Package remote holds the outbound adapters: ports.Generator implementations that run a request on a remote
// provider over HTTP, one per wire format. OpenAI speaks chat completions (and raw completions), Anthropic
// speaks Messages; both stream the provider's answer (server-sent events) into the port's events, so a request
// that came in through either inbound API can be answered by a provider of either format: inbound wire →
// ports.GenerateRequest → this package's wire → the provider, and back.
//
// What the port cannot carry, or the target format cannot express, is refused with a *ports.RequestError
// naming the field, before anything is sent. A provider's 4xx comes back as the same class of error with
// the provider's message; a 5xx, an unreadable answer or an unreachable provider as ports.ErrProvider (a bad
// gateway); cancelling the context aborts the provider's request.
package remote
