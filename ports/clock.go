package ports

import "time"

// Clock gives the domain the time without calling time.Now directly, so tests can drive it.
type Clock interface {
	Now() time.Time
}
