// Package wake runs a wake-up once after a delay, however often it is
// asked for meanwhile.
package wake

import (
	"sync/atomic"
	"time"
)

// Later calls a function once a delay has passed after it was asked to,
// folding the requests made while one call is due into that call.
//
// Rules: After schedules f to run d from now unless a call is already due,
// in which case it does nothing (the call already due serves it). A call
// runs on a goroutine of its own (time.AfterFunc), and once it has begun,
// the next After schedules a new one. The zero Later is ready to use.
type Later struct{ due atomic.Bool }

// After calls f after d, unless a call is already due.
func (l *Later) After(d time.Duration, f func()) {
	if l.due.Swap(true) {
		return
	}
	time.AfterFunc(d, func() {
		l.due.Store(false)
		f()
	})
}
