package engine

// Per-id accounting: the writes of each persistence id queued or in
// flight, which keep its writes in order and make its reads wait for them.

import "context"

// idWrites counts each persistence id's writes. Invariants: an id is in
// pending while it has writes queued or in flight (the count, > 0), in
// inFlight while it has writes in calls in flight (the count, ≤ its
// pending), and in waiters only while it is in pending; its waiters'
// channels are closed when it leaves pending.
type idWrites struct {
	pending  map[string]int
	waiters  map[string][]chan struct{}
	inFlight map[string]int
}

// answered ends the pending count of writes and releases the waiters of
// ids with none left. f.mu is held.
func (f *core[W]) answered(writes []W) {
	ids := &f.ids
	for _, w := range writes {
		pid := f.idOf(w)
		if ids.pending[pid]--; ids.pending[pid] == 0 {
			delete(ids.pending, pid)
			for _, ch := range ids.waiters[pid] {
				close(ch)
			}
			delete(ids.waiters, pid)
		}
	}
}

// landed ends the flight of writes taken into a call, and their in-flight
// counts. f.mu is held.
func (f *core[W]) landed(writes []W) {
	for _, w := range writes {
		pid := f.idOf(w)
		if f.ids.inFlight[pid]--; f.ids.inFlight[pid] == 0 {
			delete(f.ids.inFlight, pid)
		}
	}
	f.answered(writes)
}

// awaitWrites waits until the writes for pid accepted before the call have
// been answered.
func (f *core[W]) awaitWrites(ctx context.Context, pid string) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	if f.ids.pending[pid] == 0 {
		f.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	f.ids.waiters[pid] = append(f.ids.waiters[pid], ch)
	f.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
