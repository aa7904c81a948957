package journal

import (
	"context"
	"iter"
)

// Page is what one page of a paged replay asks of a store; see [Pager].
type Page struct {
	// Index counts the pages of one replay: 0 for the first, then 1, 2, ...
	// A store that pages by something else than sequence numbers (a
	// partition, a segment) finds its page from it.
	Index int
	// From is the lowest sequence number the page may hold: the replay's
	// from (at least 1) for the first page, one past the last event
	// yielded for the others. To is the replay's to.
	From, To int64
	// Limit is the most events the page may hold: the events the replay
	// still wants, at most the pager's Size. Always at least 1.
	Limit int64
}

// Pager is the paged replay every store runs: an id's events read page by
// page, each page a read of the store from one past the last sequence
// number seen, yielded as one iter.Seq2. The store gives the read of one
// page (ReadPage); the loop, the bounds, the context, the consumer's break
// and the errors are the pager's, with these rules:
//
//   - Bounds: from below 1 is read as 1. from > to, or maxEvents ≤ 0,
//     yields nothing and reads no page (a store checks Replay's arguments
//     with [CheckReplay] before). At most maxEvents events are yielded,
//     none above to.
//   - Pages: a page asks for at most Size events (Size ≤ 0: no bound but
//     maxEvents; the store bounds its memory itself, as one that streams
//     a page does), never for more than the events still wanted, from one
//     past the last event yielded.
//   - ReadPage calls yield with each of the page's events, ascending by
//     sequence number, From ≤ SequenceNr ≤ To, at most Limit (a pointer,
//     so that a large event is not copied twice: the pager copies it for
//     the consumer, and the store may reuse it once yield has returned),
//     and returns last =
//     true when no later page can hold an event (a store that reads pages
//     of Limit rows: the page held fewer). A page may be empty and not
//     last (a store's empty partition before the next one); the pager then
//     asks for the next Index with the same From. When yield returns
//     false, ReadPage stops at once, releases what it holds and returns;
//     what it returns then is ignored. A page that yielded Limit events
//     is followed by the next one while events are still wanted.
//   - The replay ends after maxEvents events, after the event at to (also
//     at math.MaxInt64, whose successor does not exist), after a last
//     page, and when the consumer breaks: then no further event is read
//     and no further page is asked for.
//   - Context: ctx is checked before each page and before each event is
//     yielded; once it has ended, the replay yields ctx.Err() and ends.
//   - Closed: when Errors.Closed reports true before a page, the replay
//     yields [ErrClosed] and ends.
//   - Errors: ReadPage's error is mapped by Errors (see [StoreErrors.Map],
//     with operation Op, "replay" when empty, and [ErrClosed]) and yielded
//     once, as the last pair, with a zero T.
//
// T is the store's event: [Repr], or a row that carries more than a Repr
// (SequenceNr reads its number).
type Pager[T any] struct {
	// Size is the most events one page asks for; ≤ 0: no bound but the
	// replay's maxEvents.
	Size int64
	// ReadPage reads one page; see the rules above.
	ReadPage func(ctx context.Context, p Page, yield func(*T) bool) (last bool, err error)
	// SequenceNr returns the sequence number of the event given.
	SequenceNr func(*T) int64
	// Errors maps ReadPage's errors and tells whether the store is closed.
	Errors StoreErrors
	// Op names the operation in mapped errors; "replay" when empty.
	Op string
}

// Replay yields the events from ≤ SequenceNr ≤ to, at most maxEvents of them,
// read page by page by the rules of [Pager].
func (p Pager[T]) Replay(ctx context.Context, from, to, maxEvents int64) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		from = max(from, 1)
		left := maxEvents
		for index := 0; from <= to && left > 0; index++ {
			if err := ctx.Err(); err != nil {
				yield(zero, err)
				return
			}
			if p.Errors.Closed != nil && p.Errors.Closed() {
				yield(zero, ErrClosed)
				return
			}
			limit := left
			if p.Size > 0 {
				limit = min(limit, p.Size)
			}
			var (
				n, seq int64
				ended  bool // the consumer broke, or ctx's end was yielded
				told   bool // yield returned false: ReadPage's results are ignored
			)
			last, err := p.ReadPage(ctx, Page{Index: index, From: from, To: to, Limit: limit}, func(v *T) bool {
				if told {
					return false // a page that goes on after being told to stop
				}
				if err := ctx.Err(); err != nil {
					yield(zero, err)
					ended, told = true, true
					return false
				}
				n, seq = n+1, p.SequenceNr(v)
				if !yield(*v, nil) {
					ended, told = true, true
					return false
				}
				if n >= limit || seq >= to {
					told = true
					return false
				}
				return true
			})
			switch {
			case ended:
				return
			case err != nil && !told:
				op := p.Op
				if op == "" {
					op = "replay"
				}
				yield(zero, p.Errors.Map(ctx, op, err, ErrClosed))
				return
			}
			left -= n
			if n > 0 {
				if seq >= to { // also at math.MaxInt64: seq+1 would wrap
					return
				}
				from = seq + 1
			}
			if last && !told {
				return
			}
		}
	}
}
