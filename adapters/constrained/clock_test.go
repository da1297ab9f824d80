package constrained

import "time"

// wallClock is the system clock (the tests time nothing; masking is timed on whatever clock is given).
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
