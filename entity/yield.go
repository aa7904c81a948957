package entity

import "sync/atomic"

// The states of an entity's yield before it gives its goroutine up (see
// instance.serve): none since its last command, one made whose outcome the
// next look at the mailbox tells, one made and told.
const (
	yieldNone = iota
	yieldPending
	yieldDone
)

// yielder decides, for a host, whether an entity whose mailbox ran empty
// yields once before it gives its goroutine up. A yield pays when a client
// answers a reply with its next command at once (a closed loop): the
// command finds the entity still running. It is wasted when commands come
// one per entity (a host recovering entities one after another, requests
// spread over many ids), where it cost a fifth of a recovery's CPU. So the
// host keeps a score of its entities' yields: a yield that found a command
// raises it, one that found none lowers it, within ±yieldScoreBound; while
// it is negative only one idle entity in yieldProbe yields, enough to see
// the load change back.
type yielder struct {
	score atomic.Int32
	idle  atomic.Uint32
}

const (
	yieldScoreBound = 16
	yieldProbe      = 8
)

// try reports whether an entity whose mailbox ran empty yields now.
func (y *yielder) try() bool {
	return y.score.Load() >= 0 || y.idle.Add(1)%yieldProbe == 0
}

// found records the outcome of a yield: whether a command was waiting
// after it.
func (y *yielder) found(command bool) {
	for {
		s := y.score.Load()
		next := s - 1
		if command {
			next = s + 1
		}
		if next > yieldScoreBound || next < -yieldScoreBound || y.score.CompareAndSwap(s, next) {
			return
		}
	}
}
