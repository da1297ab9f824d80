package ports

import (
	"context"
	"errors"
	"time"
)

// PrefixCodec is an optional ability of a Target and of a Drafter: write a PrefixState exported by one of its
// sessions as bytes, and read such bytes back into a state its sessions import. The prefix cache's disk tier
// finds it by type assertion; a model without it cannot use the disk tier (the server refuses to start with
// one). Safe for concurrent use.
type PrefixCodec interface {
	// EncodePrefix returns p as a self-describing byte string that starts with the backend's format version,
	// so later formats (an 8-bit KV, say) add to it rather than reinterpret it. p must come from a session of
	// this model; the returned bytes are the caller's.
	EncodePrefix(p PrefixState) ([]byte, error)
	// DecodePrefix returns the state b encodes: importing it continues bit-identically to the state that was
	// encoded. Bytes not written by EncodePrefix of a model of the same shapes are an error wrapping
	// ErrPrefixRecordInvalid, never a state. b is not retained.
	DecodePrefix(b []byte) (PrefixState, error)
}

// ErrPrefixRecordInvalid is wrapped by a PrefixStore or a PrefixCodec for a record that is corrupt, partial,
// of another model or of another format: the caller drops it and goes on without it.
var ErrPrefixRecordInvalid = errors.New("invalid prefix record")

// ErrPrefixRecordMissing is wrapped by PrefixStore.Get when no record has that key.
var ErrPrefixRecordMissing = errors.New("prefix record missing")

// PrefixRecord is one entry of the prefix cache's disk tier: the encoded states (PrefixCodec) of the prefix
// Tokens for one tenant.
type PrefixRecord struct {
	// Tenant is the tenant's digest (never the label itself, and never a key).
	Tenant string
	Tokens []Token
	// Target and Draft are the encoded states; Draft is nil when the entry holds no drafter context.
	Target, Draft []byte
}

// PrefixRecordInfo is what a store knows of a record without reading its states.
type PrefixRecordInfo struct {
	Tenant string
	Tokens []Token
	// Draft says whether the record holds the drafter's context.
	Draft bool
	// Bytes is what the record takes on the store.
	Bytes int64
	// Written is when the record was written (its place in the disk tier's least-recently-used order after a
	// restart).
	Written time.Time
}

// PrefixStore keeps prefix records of one model (its identity is the store's, fixed when it is opened) across
// restarts. Records are keyed by (Tenant, Tokens). Safe for concurrent use; a record is written whole or not at
// all, so a process killed mid-write leaves nothing a later Get or List returns.
type PrefixStore interface {
	// Put writes rec, replacing any record of the same key, and returns the bytes it takes.
	Put(ctx context.Context, rec PrefixRecord) (int64, error)
	// Get reads the record of (tenant, tokens), checking it is whole and this model's: an error wraps
	// ErrPrefixRecordMissing when there is none, ErrPrefixRecordInvalid when it is unusable (it is then removed).
	Get(ctx context.Context, tenant string, tokens []Token) (PrefixRecord, error)
	// Delete removes the record of (tenant, tokens); removing a missing record is not an error.
	Delete(tenant string, tokens []Token) error
	// List returns every usable record of this model the store holds, dropping (and reporting) what it finds
	// unusable: partial writes, records of another identity, unreadable headers.
	List(ctx context.Context) ([]PrefixRecordInfo, error)
}
