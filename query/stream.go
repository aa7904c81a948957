package query

import (
	"context"
	"iter"
	"sync"
	"time"
)

// Stream is a live query's results: iterate All until the context ends (or
// the query fails, or a live by-id query reaches its upper bound), then read
// Err. A Stream is iterated once.
type Stream[T any] struct {
	run  func(yield func(T) bool) error
	once sync.Once
	err  error
}

// NewStream returns a stream whose All runs run; run yields results until
// yield returns false or it ends, and returns why it ended.
func NewStream[T any](run func(yield func(T) bool) error) *Stream[T] {
	return &Stream[T]{run: run}
}

// All yields the results. Iterating a second time yields nothing.
func (s *Stream[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		s.once.Do(func() { s.err = s.run(yield) })
	}
}

// Err returns why the stream ended: nil when the consumer stopped or the
// query reached its end, the context's error when it ended, or the query's
// failure.
func (s *Stream[T]) Err() error { return s.err }

// Signal wakes live queries when a store commits: Notify after every commit,
// Wait for the channel that the next Notify closes. The zero Signal is
// ready to use.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns a channel closed by the next Notify.
func (s *Signal) Wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Notify wakes every waiter.
func (s *Signal) Notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// DefaultPollInterval is how often a live query of a commit-ordered store
// looks for events written by other processes, which no in-process signal
// announces.
const DefaultPollInterval = 500 * time.Millisecond

// Follow turns a current query over a commit-ordered store into a live
// one: it runs current, and when that ends, waits for the signal, the poll
// interval or ctx before running it again. current must resume after the
// last envelope it returned (the store's closure keeps that position), so
// every run returns only new events. done, if not nil, reports an envelope
// after which the stream ends.
func Follow(ctx context.Context, signal *Signal, poll time.Duration, current func(ctx context.Context) iter.Seq2[Envelope, error], done func(Envelope) bool) *Stream[Envelope] {
	return NewStream(func(yield func(Envelope) bool) error {
		if poll <= 0 {
			poll = DefaultPollInterval
		}
		timer := time.NewTimer(poll)
		defer timer.Stop()
		for {
			wake := signal.Wait() // before the query: a commit during it is not missed
			for env, err := range current(ctx) {
				if err != nil {
					return err
				}
				if !yield(env) {
					return nil
				}
				if done != nil && done(env) {
					return nil
				}
			}
			timer.Reset(poll)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-wake:
			case <-timer.C:
			}
		}
	})
}

// FollowOffsets is the live form of a current query that resumes after an
// offset: each run starts after the last envelope returned.
func FollowOffsets(ctx context.Context, signal *Signal, poll time.Duration, after Offset, current func(ctx context.Context, after Offset) iter.Seq2[Envelope, error]) *Stream[Envelope] {
	return Follow(ctx, signal, poll, func(ctx context.Context) iter.Seq2[Envelope, error] {
		return func(yield func(Envelope, error) bool) {
			for env, err := range current(ctx, after) {
				if err == nil {
					after = env.Offset
				}
				if !yield(env, err) {
					return
				}
			}
		}
	}, nil)
}

// FollowByID is the live form of a current events-by-persistence-id query:
// each run starts after the last sequence number returned, and the stream
// ends after the event at to.
func FollowByID(ctx context.Context, signal *Signal, poll time.Duration, from, to int64, current func(ctx context.Context, from, to int64) iter.Seq2[Envelope, error]) *Stream[Envelope] {
	if from > to {
		return NewStream(func(func(Envelope) bool) error { return nil })
	}
	return Follow(ctx, signal, poll, func(ctx context.Context) iter.Seq2[Envelope, error] {
		return func(yield func(Envelope, error) bool) {
			for env, err := range current(ctx, from, to) {
				if err == nil {
					from = env.SequenceNr + 1
				}
				if !yield(env, err) {
					return
				}
			}
		}
	}, func(env Envelope) bool { return env.SequenceNr >= to })
}

// FollowPersistenceIDs is a live persistence-ids query: the ids of known,
// then the id of each event of events not seen before, each once.
func FollowPersistenceIDs(known []string, events *Stream[Envelope]) *Stream[string] {
	return NewStream(func(yield func(string) bool) error {
		seen := make(map[string]bool, len(known))
		for _, id := range known {
			seen[id] = true
			if !yield(id) {
				return nil
			}
		}
		for env := range events.All() {
			if seen[env.PersistenceID] {
				continue
			}
			seen[env.PersistenceID] = true
			if !yield(env.PersistenceID) {
				return nil
			}
		}
		return events.Err()
	})
}
