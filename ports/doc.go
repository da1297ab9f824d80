// Package ports holds the interfaces the domain needs from the outside world and the value types that cross
// those boundaries. It imports only the standard library.
//
// The interfaces are shaped from the domain's call sites: model-level verbs (open a session, forward a block
// with taps, roll back, draft a block), never tensor operations. Optional abilities are small extra interfaces
// discovered by type assertion (see TapeReplayer); "not on this backend" is reported as an error wrapping
// errors.ErrUnsupported.
package ports
