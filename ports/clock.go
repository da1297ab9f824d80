package ports

import "time"

// Clock gives the domain the time without calling time.Now directly, so tests can drive it.
type Clock interface {
	Now() time.Time
}

// Rand is a seeded source of uniform numbers. Not safe for concurrent use; each generation owns one.
type Rand interface {
	// Float64 returns a uniform number in [0, 1).
	Float64() float64
}
