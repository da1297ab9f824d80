// Package httpapi is the HTTP plumbing higgsd's APIs share, so that the OpenAI-compatible API
// (adapters/openai) and the Messages API (adapters/anthropic) are siblings that import it and never each
// other.
//
// It holds what is the same whatever an API's wire format: one Server that every API registers its routes
// on (one mux, one listener, the request metrics and /metrics), bounded body reads (a size limit and a time
// limit, with the connection closed on a client that withholds its body), refusing a request without reading
// its body, the browser checks (browser.go: Guard refuses a Host not answered to, GuardJSON a body that is
// not JSON, and CORS is answered for the origins allowed), Bearer credentials, JSON answers without HTML
// escaping, the server-sent events writer, panic recovery, and the one shutdown lifecycle of every API's work (drain.go: Work tracks a generation route,
// Drain refuses new work, waits for the work in flight and cuts what runs past the deadline). What differs between the APIs — error shapes, status mapping, authentication headers, event
// names — stays in each API's package: helpers here take the API's own answer (a fallback body, a func that
// writes its 500 or its 503 refusal) rather than knowing any shape, and each API ends a cut request with its
// own terminal event.
package httpapi
