package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
)

// TestRecoveryAsThreeCallsRandom: random histories (writes of one to five
// events, some after a gap of numbers, some of numbers a deletion freed;
// snapshots at 0, at stored numbers, at deleted ones and above the last
// event, some with an empty payload; deletions to random numbers, to a
// snapshot's and past the last event), each read with random requests
// (snapshot criteria nil, Latest, None, the zero criteria, bounded below
// or above; MaxEvents 0, small or up to math.MaxInt; ToSequenceNr 0, a
// number or math.MaxInt64): ReadRecovery, and ReadRecoveries of several
// requests of several ids in one call, equal the three-call read
// (recovery.Read), on Annals' layout in both orderings (recoveryOpenSQL
// and its second reads) and on the r2dbc layout (recoverySQL). The seed
// is fixed: a failure names the id, its history and the request.
// layoutsAndOrderings are the store's write paths: Annals' layout in each
// ordering, and the r2dbc layout (TimestampOrder only).
var layoutsAndOrderings = []struct {
	name string
	opts []postgres.Option
}{
	{"commit", []postgres.Option{postgres.WithOrdering(postgres.CommitOrder)}},
	{"timestamp", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder)}},
	{"r2dbc", []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC)}},
}

func TestRecoveryAsThreeCallsRandom(t *testing.T) {
	t.Parallel()
	for ci, c := range layoutsAndOrderings {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, c.opts...)
			j, snaps := s.Journal(), s.Snapshots()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(20261129, uint64(ci)))
			const ids = 100
			type read struct {
				req     recovery.Request
				history string
			}
			var reads []read
			for id := range ids {
				pid := fmt.Sprintf("Recovery|%s-%d", c.name, id)
				h := randomHistory(t, rng, j, snaps, pid)
				for range 8 {
					req := h.randomRequest(rng)
					reads = append(reads, read{req, h.log.String()})
					want, err := recovery.Read(ctx, j, snaps, req)
					if err != nil {
						t.Fatalf("recovery.Read(%s): %v", describeRequest(req), err)
					}
					got, err := j.ReadRecovery(ctx, req)
					if err != nil {
						t.Fatalf("ReadRecovery(%s): %v\nhistory: %s", describeRequest(req), err, h.log.String())
					}
					if d := diffResults(got, want); d != "" {
						t.Errorf("ReadRecovery(%s) differs from recovery.Read: %s\nhistory: %s", describeRequest(req), d, h.log.String())
					}
				}
			}
			// The reads again, in batches of one to eight requests of
			// several ids, against the three-call read.
			rng.Shuffle(len(reads), func(a, b int) { reads[a], reads[b] = reads[b], reads[a] })
			for len(reads) > 0 {
				n := min(len(reads), 1+rng.IntN(8))
				batch := reads[:n]
				reads = reads[n:]
				reqs := make([]recovery.Request, n)
				for i, r := range batch {
					reqs[i] = r.req
				}
				got, err := j.ReadRecoveries(ctx, reqs)
				if err != nil {
					t.Fatalf("ReadRecoveries: %v", err)
				}
				if len(got) != n {
					t.Fatalf("ReadRecoveries returned %d results for %d requests", len(got), n)
				}
				for i, r := range batch {
					want, err := recovery.Read(ctx, j, snaps, r.req)
					if err != nil {
						t.Fatal(err)
					}
					if d := diffResults(got[i], want); d != "" {
						t.Errorf("ReadRecoveries[%d of %d](%s) differs from recovery.Read: %s\nhistory: %s", i, n, describeRequest(r.req), d, r.history)
					}
				}
			}
		})
	}
}

// randomIDHistory is what randomHistory wrote of an id: enough to draw
// requests that reach its numbers.
type randomIDHistory struct {
	pid   string
	top   int64   // the highest number written or deleted to
	snaps []int64 // the numbers snapshots were saved at
	log   strings.Builder
}

// randomHistory writes a random history of pid through j and snaps.
func randomHistory(t *testing.T, rng *rand.Rand, j *postgres.Journal, snaps *postgres.Snapshots, pid string) *randomIDHistory {
	t.Helper()
	ctx := context.Background()
	h := &randomIDHistory{pid: pid}
	var deleted int64 // the highest number deleted to
	ops := 1 + rng.IntN(9)
	for op := range ops {
		switch r := rng.IntN(100); {
		case r < 45 || op == 0:
			// Events after the highest, some after a gap; or a number a
			// deletion freed.
			from := h.top + 1
			if rng.IntN(5) == 0 {
				from += int64(1 + rng.IntN(3))
			}
			if deleted > 0 && rng.IntN(6) == 0 {
				from = 1 + rng.Int64N(deleted)
			}
			n := int64(1 + rng.IntN(5))
			if from <= deleted {
				n = 1
			}
			w := journal.AtomicWrite{PersistenceID: pid}
			for seq := from; seq < from+n; seq++ {
				e := journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: randomBytes(rng, 12), SerializerID: int32(1 + rng.IntN(3)),
					Manifest: []string{"", "a", "b"}[rng.IntN(3)], WriterID: []string{"w1", "w2"}[rng.IntN(2)]}
				if rng.IntN(3) == 0 {
					e.Tags = []string{"t1", "t2"}[:1+rng.IntN(2)]
				}
				if rng.IntN(3) == 0 {
					e.Metadata = randomBytes(rng, 4)
				}
				w.Events = append(w.Events, e)
			}
			res, err := j.Write(ctx, []journal.AtomicWrite{w})
			if err != nil {
				t.Fatalf("write %s %d..%d: %v", pid, from, from+n-1, err)
			}
			if res != nil && res[0] != nil {
				if !errors.Is(res[0], journal.ErrRejected) {
					t.Fatalf("write %s %d..%d: %v", pid, from, from+n-1, res[0])
				}
				fmt.Fprintf(&h.log, "write %d..%d (rejected); ", from, from+n-1)
				continue
			}
			h.top = max(h.top, from+n-1)
			fmt.Fprintf(&h.log, "write %d..%d; ", from, from+n-1)
		case r < 75:
			// A snapshot at 0, at the highest, at a random number up to
			// 3 above it.
			var seq int64
			switch rng.IntN(4) {
			case 0:
				seq = 0
			case 1:
				seq = h.top
			default:
				seq = rng.Int64N(h.top + 4)
			}
			payload := randomBytes(rng, 8)
			if rng.IntN(4) == 0 {
				payload = []byte{}
			}
			snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: seq, Timestamp: time.Now()},
				Payload: payload, SerializerID: int32(rng.IntN(5)), Manifest: []string{"", "state"}[rng.IntN(2)]}
			if err := snaps.Save(ctx, snap); err != nil {
				t.Fatalf("save snapshot %s %d: %v", pid, seq, err)
			}
			h.snaps = append(h.snaps, seq)
			fmt.Fprintf(&h.log, "snapshot %d (%d bytes); ", seq, len(payload))
		default:
			// A deletion to a random number up to 3 above the highest, or
			// to a snapshot's number.
			to := rng.Int64N(h.top + 4)
			if len(h.snaps) > 0 && rng.IntN(2) == 0 {
				to = h.snaps[rng.IntN(len(h.snaps))]
			}
			if err := j.DeleteTo(ctx, pid, to); err != nil {
				t.Fatalf("delete %s to %d: %v", pid, to, err)
			}
			deleted = max(deleted, min(to, h.top))
			fmt.Fprintf(&h.log, "deleteTo %d; ", to)
		}
	}
	return h
}

// randomRequest draws a request of h's id.
func (h *randomIDHistory) randomRequest(rng *rand.Rand) recovery.Request {
	req := recovery.Request{PersistenceID: h.pid}
	num := func() int64 { // a number around the history's
		if len(h.snaps) > 0 && rng.IntN(3) == 0 {
			return h.snaps[rng.IntN(len(h.snaps))] + int64(rng.IntN(3)) - 1
		}
		return rng.Int64N(h.top + 4)
	}
	var crit snapshot.Criteria
	switch rng.IntN(8) {
	case 0:
		// nil: no snapshot
	case 1:
		crit = snapshot.None()
		req.Snapshot = &crit
	case 2:
		crit = snapshot.Criteria{} // the snapshot at 0 alone
		req.Snapshot = &crit
	case 3:
		crit = snapshot.Criteria{MaxSequenceNr: num()}
		req.Snapshot = &crit
	case 4:
		crit = snapshot.Criteria{MinSequenceNr: num(), MaxSequenceNr: math.MaxInt64}
		req.Snapshot = &crit
	default:
		crit = snapshot.Latest()
		req.Snapshot = &crit
	}
	req.MaxEvents = []int{0, 0, 1, 1, 2, 3, 4, 5, 7, math.MaxInt, math.MaxInt - 1}[rng.IntN(11)]
	switch r := rng.IntN(10); {
	case r < 6:
	case r < 7:
		req.ToSequenceNr = math.MaxInt64
	default:
		req.ToSequenceNr = max(1, num())
	}
	return req
}

func randomBytes(rng *rand.Rand, max int) []byte {
	b := make([]byte, rng.IntN(max+1))
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return b
}

func describeRequest(req recovery.Request) string {
	crit := "nil"
	if req.Snapshot != nil {
		crit = fmt.Sprintf("%+v", *req.Snapshot)
	}
	return fmt.Sprintf("%s snapshot %s to %d max %d", req.PersistenceID, crit, req.ToSequenceNr, req.MaxEvents)
}

// diffResults describes how got differs from want, "" when they agree
// (payloads byte for byte, nil and empty alike).
func diffResults(got, want recovery.Result) string {
	var d []string
	if got.Highest != want.Highest {
		d = append(d, fmt.Sprintf("Highest %d, want %d", got.Highest, want.Highest))
	}
	if got.HasSnapshot != want.HasSnapshot {
		d = append(d, fmt.Sprintf("HasSnapshot %v (at %d), want %v (at %d)", got.HasSnapshot, got.Snapshot.Metadata.SequenceNr, want.HasSnapshot, want.Snapshot.Metadata.SequenceNr))
	} else if want.HasSnapshot {
		g, w := got.Snapshot, want.Snapshot
		if g.Metadata.PersistenceID != w.Metadata.PersistenceID || g.Metadata.SequenceNr != w.Metadata.SequenceNr || !g.Metadata.Timestamp.Equal(w.Metadata.Timestamp) ||
			!bytes.Equal(g.Payload, w.Payload) || g.SerializerID != w.SerializerID || g.Manifest != w.Manifest {
			d = append(d, fmt.Sprintf("snapshot %+v, want %+v", g, w))
		}
	}
	if got.More != want.More {
		d = append(d, fmt.Sprintf("More %v, want %v", got.More, want.More))
	}
	seqs := func(es []journal.Repr) []int64 {
		var s []int64
		for _, e := range es {
			s = append(s, e.SequenceNr)
		}
		return s
	}
	if !slices.Equal(seqs(got.Events), seqs(want.Events)) {
		d = append(d, fmt.Sprintf("events %v, want %v", seqs(got.Events), seqs(want.Events)))
	} else {
		for i, g := range got.Events {
			w := want.Events[i]
			if g.PersistenceID != w.PersistenceID || !bytes.Equal(g.Payload, w.Payload) || g.SerializerID != w.SerializerID || g.Manifest != w.Manifest ||
				!g.Timestamp.Equal(w.Timestamp) || g.WriterID != w.WriterID || !slices.Equal(g.Tags, w.Tags) || !bytes.Equal(g.Metadata, w.Metadata) ||
				g.Slice != w.Slice || g.EntityType != w.EntityType {
				d = append(d, fmt.Sprintf("event %d: %+v, want %+v", g.SequenceNr, g, w))
			}
		}
	}
	return strings.Join(d, "; ")
}

// TestRecoveryUnderConcurrentWrites: while a writer appends an id's
// events one at a time, saves a snapshot at every seventh and deletes the
// events up to an earlier snapshot's number or to the latest one's (its
// own event: recoveryOpenSQL then carries the snapshot on the event after
// the deleted number), readers read its recovery
// from its latest snapshot, one at a time and in batches, with MaxEvents
// small enough that reads stop at their limit (the highest number read
// after the events). Every result keeps Result's rules as an entity
// relies on them: Highest is at least the highest number acknowledged
// before the read; the events follow the snapshot without a gap; More is
// set exactly when MaxEvents were read below Highest; and without More
// the recovery ends at Highest (no event between the last read and
// Highest is skipped).
func TestRecoveryUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	for _, c := range layoutsAndOrderings {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, c.opts...)
			j, snaps := s.Journal(), s.Snapshots()
			ctx := context.Background()
			const writers, events = 2, 250
			var wg sync.WaitGroup
			for w := range writers {
				pid := fmt.Sprintf("Recovery|concurrent-%s-%d", c.name, w)
				var acked atomic.Int64
				done := make(chan struct{})
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer close(done)
					rng := rand.New(rand.NewPCG(7, uint64(w)))
					var snapSeqs []int64
					for seq := int64(1); seq <= events; seq++ {
						e := journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte("e"), SerializerID: 1}
						if res, err := j.Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{e}}}); err != nil || res != nil {
							t.Errorf("write %d: %v %v", seq, res, err)
							return
						}
						acked.Store(seq)
						if seq%7 != 0 {
							continue
						}
						snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: seq}, Payload: fmt.Appendf(nil, "state@%d", seq), SerializerID: 2}
						if err := snaps.Save(ctx, snap); err != nil {
							t.Errorf("save snapshot %d: %v", seq, err)
							return
						}
						snapSeqs = append(snapSeqs, seq)
						if rng.IntN(3) == 0 {
							to := snapSeqs[rng.IntN(len(snapSeqs))]
							if err := j.DeleteTo(ctx, pid, to); err != nil {
								t.Errorf("delete to %d: %v", to, err)
								return
							}
						}
					}
				}()
				for r := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(11, uint64(w*2+r)))
						latest := snapshot.Latest()
						for {
							select {
							case <-done:
								return
							default:
							}
							n := 1 + rng.IntN(3)
							reqs := make([]recovery.Request, n)
							for i := range reqs {
								reqs[i] = recovery.Request{PersistenceID: pid, Snapshot: &latest, MaxEvents: []int{1, 2, 3, 5, 0}[rng.IntN(5)]}
							}
							before := acked.Load()
							var results []recovery.Result
							if n == 1 && rng.IntN(2) == 0 {
								res, err := j.ReadRecovery(ctx, reqs[0])
								if err != nil {
									t.Errorf("ReadRecovery: %v", err)
									return
								}
								results = []recovery.Result{res}
							} else {
								var err error
								if results, err = j.ReadRecoveries(ctx, reqs); err != nil {
									t.Errorf("ReadRecoveries: %v", err)
									return
								}
							}
							for i, res := range results {
								if err := checkConcurrentResult(res, reqs[i], before); err != nil {
									t.Errorf("%s, max %d (acknowledged before the read: %d): %v", pid, reqs[i].MaxEvents, before, err)
								}
							}
						}
					}()
				}
			}
			wg.Wait()
		})
	}
}

// checkConcurrentResult checks res, read for req after the events up to
// before were acknowledged, of an id written one event at a time from 1
// whose deletions stop at a snapshot's number.
func checkConcurrentResult(res recovery.Result, req recovery.Request, before int64) error {
	maxEvents := req.MaxEvents
	if maxEvents == 0 {
		maxEvents = recovery.DefaultMaxEvents
	}
	if res.Highest < before {
		return fmt.Errorf("Highest %d below the %d acknowledged", res.Highest, before)
	}
	end := int64(0) // the last number the recovery applies
	if res.HasSnapshot {
		end = res.Snapshot.Metadata.SequenceNr
		if want := fmt.Sprintf("state@%d", end); string(res.Snapshot.Payload) != want {
			return fmt.Errorf("snapshot %d payload %q, want %q", end, res.Snapshot.Payload, want)
		}
	}
	for _, e := range res.Events {
		if e.SequenceNr != end+1 {
			return fmt.Errorf("event %d after %d (snapshot %v at %d): a gap", e.SequenceNr, end, res.HasSnapshot, res.Snapshot.Metadata.SequenceNr)
		}
		end = e.SequenceNr
	}
	if end > res.Highest {
		return fmt.Errorf("the recovery reaches %d, beyond Highest %d", end, res.Highest)
	}
	n := len(res.Events)
	wantMore := n == maxEvents && n > 0 && end < res.Highest
	if res.More != wantMore {
		return fmt.Errorf("More %v with %d events to %d, Highest %d", res.More, n, end, res.Highest)
	}
	if !res.More && end != res.Highest {
		return fmt.Errorf("no More, and the recovery ends at %d below Highest %d: events skipped", end, res.Highest)
	}
	return nil
}
