package journal_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
)

// rowPages is a fake store that reads pages of Limit rows, as the SQL
// stores do: a page is the stored numbers From..To, at most Limit, and a
// shorter page is the last.
func rowPages(stored []int64) func(context.Context, journal.Page, func(*int64) bool) (bool, error) {
	return func(_ context.Context, p journal.Page, yield func(*int64) bool) (bool, error) {
		var page []int64
		for _, s := range stored {
			if s >= p.From && s <= p.To && int64(len(page)) < p.Limit {
				page = append(page, s)
			}
		}
		for _, s := range page {
			if !yield(&s) {
				return true, nil
			}
		}
		return int64(len(page)) < p.Limit, nil
	}
}

// partitionPages is a fake store that streams partitions of 10 numbers,
// as Cassandra does: page Index is partition Index, and an empty partition
// after the first ends the replay.
func partitionPages(stored []int64) func(context.Context, journal.Page, func(*int64) bool) (bool, error) {
	return func(_ context.Context, p journal.Page, yield func(*int64) bool) (bool, error) {
		n := 0
		for _, s := range stored {
			if (s-1)/10 == int64(p.Index) && s >= p.From && s <= p.To {
				n++
				if !yield(&s) {
					return false, errors.New("a stopped page's error is ignored")
				}
			}
		}
		return n == 0 && p.Index > 0, nil
	}
}

func seqs(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func TestPager(t *testing.T) {
	boom := errors.New("connection reset")
	cases := []struct {
		name          string
		stored        []int64
		partitions    bool
		size          int64
		from, to, max int64
		stopAfter     int  // the consumer breaks after this many events (0: never)
		cancelAfter   int  // ctx is cancelled after this many events (0: never)
		failPage      int  // this page (1-based) fails with boom (0: never)
		closed        bool // the store reports closed
		want          []int64
		wantPages     []journal.Page
		wantErr       func(error) bool
	}{
		{name: "pages of Size from the last number seen", stored: seqs(1, 7), size: 3, from: 1, to: 100, max: 100,
			want:      seqs(1, 7),
			wantPages: []journal.Page{{0, 1, 100, 3}, {1, 4, 100, 3}, {2, 7, 100, 3}}},
		{name: "a full last page costs one more, empty page", stored: seqs(1, 6), size: 3, from: 1, to: 100, max: 100,
			want:      seqs(1, 6),
			wantPages: []journal.Page{{0, 1, 100, 3}, {1, 4, 100, 3}, {2, 7, 100, 3}}},
		{name: "from below 1 is read as 1", stored: seqs(1, 2), size: 10, from: -5, to: 100, max: 100,
			want: seqs(1, 2), wantPages: []journal.Page{{0, 1, 100, 10}}},
		{name: "gaps: the next page starts after the last number seen", stored: []int64{2, 5, 9, 14, 20}, size: 2, from: 3, to: 100, max: 100,
			want:      []int64{5, 9, 14, 20},
			wantPages: []journal.Page{{0, 3, 100, 2}, {1, 10, 100, 2}, {2, 21, 100, 2}}},
		{name: "max bounds the events and each page's limit", stored: seqs(1, 20), size: 4, from: 1, to: 100, max: 6,
			want: seqs(1, 6), wantPages: []journal.Page{{0, 1, 100, 4}, {1, 5, 100, 2}}},
		{name: "to bounds the events; no page after the event at to", stored: seqs(1, 20), size: 4, from: 2, to: 5, max: 100,
			want: seqs(2, 5), wantPages: []journal.Page{{0, 2, 5, 4}}},
		{name: "max 0 reads no page", stored: seqs(1, 5), size: 4, from: 1, to: 100, max: 0},
		{name: "from above to reads no page", stored: seqs(1, 5), size: 4, from: 6, to: 5, max: 100},
		{name: "the top of the range ends without wrapping", stored: []int64{math.MaxInt64 - 1, math.MaxInt64}, size: 2,
			from: math.MaxInt64 - 1, to: math.MaxInt64, max: math.MaxInt64,
			want:      []int64{math.MaxInt64 - 1, math.MaxInt64},
			wantPages: []journal.Page{{0, math.MaxInt64 - 1, math.MaxInt64, 2}}},
		{name: "the consumer's break reads no further page", stored: seqs(1, 20), size: 4, from: 1, to: 100, max: 100, stopAfter: 5,
			want: seqs(1, 5), wantPages: []journal.Page{{0, 1, 100, 4}, {1, 5, 100, 4}}},
		{name: "a break at a page's end reads no further page", stored: seqs(1, 20), size: 4, from: 1, to: 100, max: 100, stopAfter: 4,
			want: seqs(1, 4), wantPages: []journal.Page{{0, 1, 100, 4}}},
		{name: "ctx is checked before each event", stored: seqs(1, 20), size: 4, from: 1, to: 100, max: 100, cancelAfter: 2,
			want: seqs(1, 2), wantPages: []journal.Page{{0, 1, 100, 4}},
			wantErr: func(err error) bool { return err == context.Canceled }},
		{name: "ctx is checked before each page", stored: seqs(1, 20), size: 4, from: 1, to: 100, max: 100, cancelAfter: 4,
			want: seqs(1, 4), wantPages: []journal.Page{{0, 1, 100, 4}},
			wantErr: func(err error) bool { return err == context.Canceled }},
		{name: "a closed store yields ErrClosed", stored: seqs(1, 20), size: 4, from: 1, to: 100, max: 100, closed: true,
			wantErr: func(err error) bool { return err == journal.ErrClosed }},
		{name: "a page's error is wrapped with the store and the operation, last", stored: seqs(1, 20), size: 4, from: 1, to: 100, max: 100, failPage: 2,
			want: seqs(1, 4), wantPages: []journal.Page{{0, 1, 100, 4}, {1, 5, 100, 4}},
			wantErr: func(err error) bool {
				return errors.Is(err, boom) && err.Error() == "fake: replay: connection reset"
			}},
		{name: "streamed partitions: short pages go on, an empty one after the first ends", stored: []int64{3, 4, 12, 25, 27}, partitions: true,
			from: 4, to: 100, max: 100,
			want: []int64{4, 12, 25, 27},
			wantPages: []journal.Page{{0, 4, 100, 100}, {1, 5, 100, 99}, {2, 13, 100, 98},
				{3, 28, 100, 96}}},
		{name: "streamed partitions: an empty page that is not last asks the next index from the same number", stored: []int64{15}, partitions: true,
			from: 1, to: 100, max: 100,
			want:      []int64{15},
			wantPages: []journal.Page{{0, 1, 100, 100}, {1, 1, 100, 100}, {2, 16, 100, 99}}},
		{name: "streamed partitions: max stops a page midway and ignores what it returns", stored: seqs(1, 30), partitions: true,
			from: 1, to: 100, max: 13,
			want: seqs(1, 13), wantPages: []journal.Page{{0, 1, 100, 13}, {1, 11, 100, 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			read := rowPages(c.stored)
			if c.partitions {
				read = partitionPages(c.stored)
			}
			var pages []journal.Page
			pager := journal.Pager[int64]{
				Size: c.size,
				ReadPage: func(ctx context.Context, p journal.Page, yield func(*int64) bool) (bool, error) {
					pages = append(pages, p)
					if len(pages) == c.failPage {
						return false, boom
					}
					return read(ctx, p, yield)
				},
				SequenceNr: func(s *int64) int64 { return *s },
				Errors:     journal.StoreErrors{Store: "fake", Closed: func() bool { return c.closed }},
			}
			var got []int64
			var gotErr error
			for s, err := range pager.Replay(ctx, c.from, c.to, c.max) {
				if gotErr != nil {
					t.Fatalf("a pair after the error %v", gotErr)
				}
				if err != nil {
					if s != 0 {
						t.Errorf("error %v with event %d, want a zero one", err, s)
					}
					gotErr = err
					continue
				}
				got = append(got, s)
				if len(got) == c.cancelAfter {
					cancel()
				}
				if len(got) == c.stopAfter {
					break
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("events %v, want %v", got, c.want)
			}
			if !slices.Equal(pages, c.wantPages) {
				t.Errorf("pages asked %v, want %v", pages, c.wantPages)
			}
			switch {
			case c.wantErr == nil && gotErr != nil:
				t.Errorf("error %v, want none", gotErr)
			case c.wantErr != nil && (gotErr == nil || !c.wantErr(gotErr)):
				t.Errorf("error %v, not the one wanted", gotErr)
			}
		})
	}
}

func TestPagerOp(t *testing.T) {
	pager := journal.Pager[int64]{
		Size:       10,
		ReadPage:   func(context.Context, journal.Page, func(*int64) bool) (bool, error) { return false, errors.New("gone") },
		SequenceNr: func(s *int64) int64 { return *s },
		Errors:     journal.StoreErrors{Store: "fake"},
		Op:         "read recovery",
	}
	for _, err := range pager.Replay(t.Context(), 1, 10, 10) {
		if err == nil || err.Error() != "fake: read recovery: gone" {
			t.Errorf("error %v, want one naming the operation", err)
		}
	}
}

func TestStoreErrorsMap(t *testing.T) {
	driver := errors.New("driver: broken pipe")
	snapClosed := errors.New("snapshot: closed")
	live, cancelled := context.Background(), func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancelExpired()
	rejection := journal.Reject("too large")
	conflict := &journal.ConflictError{PersistenceID: "A|1", SequenceNr: 3}
	cases := []struct {
		name   string
		ctx    context.Context
		closed bool
		err    error
		snap   bool // a snapshot call: closed is snapClosed
		want   func(error) bool
	}{
		{name: "nil stays nil", ctx: cancelled, closed: true, err: nil,
			want: func(err error) bool { return err == nil }},
		{name: "a driver error is wrapped with the store and operation", ctx: live, err: driver,
			want: func(err error) bool {
				return errors.Is(err, driver) && err.Error() == "sqlite: replay: driver: broken pipe"
			}},
		{name: "an ended ctx's error is returned itself", ctx: cancelled, err: driver,
			want: func(err error) bool { return err == context.Canceled }},
		{name: "an expired deadline is returned itself", ctx: expired, err: driver,
			want: func(err error) bool { return err == context.DeadlineExceeded }},
		{name: "ctx before closed", ctx: cancelled, closed: true, err: driver,
			want: func(err error) bool { return err == context.Canceled }},
		{name: "after Close, ErrClosed", ctx: live, closed: true, err: driver,
			want: func(err error) bool { return err == journal.ErrClosed }},
		{name: "after Close, a snapshot call's closed error", ctx: live, closed: true, err: driver, snap: true,
			want: func(err error) bool { return err == snapClosed }},
		{name: "a rejection stays a rejection", ctx: cancelled, closed: true, err: rejection,
			want: func(err error) bool { return err == rejection }},
		{name: "a conflict stays a conflict", ctx: cancelled, closed: true, err: conflict,
			want: func(err error) bool { return err == error(conflict) }},
		{name: "an invalid argument stays one", ctx: live, err: journal.CheckID("delete", "", 1),
			want: func(err error) bool {
				return errors.Is(err, journal.ErrInvalidArgument) && !strings.HasPrefix(err.Error(), "sqlite")
			}},
		{name: "ErrClosed is not wrapped again", ctx: live, err: journal.ErrClosed,
			want: func(err error) bool { return err == journal.ErrClosed }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := journal.StoreErrors{Store: "sqlite", Closed: func() bool { return c.closed }}
			closed := journal.ErrClosed
			if c.snap {
				closed = snapClosed
			}
			if got := r.Map(c.ctx, "replay", c.err, closed); !c.want(got) {
				t.Errorf("Map(%v) = %v", c.err, got)
			}
		})
	}
	if got := (journal.StoreErrors{}).Map(live, "write", driver, nil); got.Error() != "write: driver: broken pipe" {
		t.Errorf("the zero StoreErrors: %v", got)
	}
	if got := (journal.StoreErrors{Closed: func() bool { return true }}).Map(live, "write", driver, nil); got != journal.ErrClosed {
		t.Errorf("a nil closed error means ErrClosed: %v", got)
	}
}

// BenchmarkPager measures the pager's own cost per event against the loop
// the stores ran before it, over the same pages of 1,000 events already in
// memory: what a store's replay pays for the pager on top of its reads.
func BenchmarkPager(b *testing.B) {
	const n, size = 10_000, 1000
	stored := make([]journal.Repr, n)
	for i := range stored {
		stored[i] = journal.Repr{PersistenceID: "Bench|1", SequenceNr: int64(i + 1)}
	}
	page := func(from, limit int64) []journal.Repr {
		return stored[min(from-1, n):min(from-1+limit, n)]
	}
	b.Run("pager", func(b *testing.B) {
		ctx := b.Context()
		p := journal.Pager[journal.Repr]{
			Size: size,
			ReadPage: func(_ context.Context, p journal.Page, yield func(*journal.Repr) bool) (bool, error) {
				pg := page(p.From, p.Limit)
				for i := range pg {
					if !yield(&pg[i]) {
						return true, nil
					}
				}
				return int64(len(pg)) < p.Limit, nil
			},
			SequenceNr: func(e *journal.Repr) int64 { return e.SequenceNr },
		}
		for b.Loop() {
			count := 0
			for _, err := range p.Replay(ctx, 1, n, n) {
				if err != nil {
					b.Fatal(err)
				}
				count++
			}
			if count != n {
				b.Fatalf("replayed %d", count)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	})
	b.Run("hand loop", func(b *testing.B) {
		ctx := b.Context()
		replay := func(yield func(journal.Repr, error) bool) {
			from, limit := int64(1), int64(n)
			for from <= n && limit > 0 {
				pg := page(from, min(limit, size))
				for _, e := range pg {
					if err := ctx.Err(); err != nil {
						yield(journal.Repr{}, err)
						return
					}
					if !yield(e, nil) {
						return
					}
				}
				if int64(len(pg)) < min(limit, size) {
					return
				}
				limit -= int64(len(pg))
				from = pg[len(pg)-1].SequenceNr + 1
			}
		}
		for b.Loop() {
			count := 0
			for _, err := range replay {
				if err != nil {
					b.Fatal(err)
				}
				count++
			}
			if count != n {
				b.Fatalf("replayed %d", count)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
	})
}
