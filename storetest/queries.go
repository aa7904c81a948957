package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

type queryRule struct {
	name, rule string
	run        func(t tb, j journal.Journal, rj any, s Store)
}

// queryRules is the queries suite: the rules of the query capabilities
// s.Queries offers, over the events written through s.Journal; the rules
// of the others are skipped.
func queryRules(s Store) []rule {
	return bind(queryCases(), s)
}

// bind binds the query rules qs to s.
func bind(qs []queryRule, s Store) []rule {
	var rules []rule
	for _, r := range qs {
		rules = append(rules, rule{r.name, r.rule, func(t tb) { r.run(t, s.Journal, s.Queries, s) }})
	}
	return rules
}

func capability[Q any](t tb, rj any) Q {
	t.Helper()
	q, ok := rj.(Q)
	if !ok {
		var zero Q
		t.Skipf("store does not offer %T", &zero)
	}
	return q
}

// taggedEvents writes n events of pid (from seq 1), each tagged with tags.
func taggedEvents(t tb, j journal.Journal, pid string, from, to int64, tags ...string) {
	t.Helper()
	w := journal.AtomicWrite{PersistenceID: pid}
	for s := from; s <= to; s++ {
		e := ev(pid, s)
		e.Tags = tags
		w.Events = append(w.Events, e)
	}
	mustWrite(t, j, w)
}

func collect(t tb, seq func(func(query.Envelope, error) bool)) []query.Envelope {
	t.Helper()
	var out []query.Envelope
	for env, err := range seq {
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		out = append(out, env)
	}
	return out
}

func idSeqs(envs []query.Envelope) []string {
	var out []string
	for _, e := range envs {
		out = append(out, fmt.Sprintf("%s#%d", annals.EntityType(e.PersistenceID), e.SequenceNr))
	}
	return out
}

// sliceQuery and tagQuery give the two offset-ordered queries one shape.
type offsetQuery struct {
	name    string
	current func(ctx context.Context, after query.Offset) func(func(query.Envelope, error) bool)
	live    func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope]
}

// offsetQueries returns the offset-ordered queries rj offers, each over
// the events of entity type et (by slices: all slices) or tagged tag.
func offsetQueries(rj any, et, tag string) []offsetQuery {
	var qs []offsetQuery
	if q, ok := rj.(query.EventsByTagQuery); ok {
		qs = append(qs, offsetQuery{"by tag",
			func(ctx context.Context, after query.Offset) func(func(query.Envelope, error) bool) {
				return q.CurrentEventsByTag(ctx, tag, after)
			},
			func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
				return q.EventsByTag(ctx, tag, after)
			}})
	}
	if q, ok := rj.(query.EventsBySlicesQuery); ok {
		qs = append(qs, offsetQuery{"by slices",
			func(ctx context.Context, after query.Offset) func(func(query.Envelope, error) bool) {
				return q.CurrentEventsBySlices(ctx, et, 0, annals.NumberOfSlices-1, after)
			},
			func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
				return q.EventsBySlices(ctx, et, 0, annals.NumberOfSlices-1, after)
			}})
	}
	return qs
}

// eachOffsetQuery runs f as a subtest for each offset-ordered query rj
// offers, each over an entity type and tag of its own.
func eachOffsetQuery(t tb, rj any, f func(t tb, q offsetQuery, et, tag string)) {
	_, probe := rj.(query.EventsByTagQuery)
	_, probe2 := rj.(query.EventsBySlicesQuery)
	if !probe && !probe2 {
		t.Skip("store offers neither events by tag nor by slices")
	}
	for _, name := range []string{"by tag", "by slices"} {
		t.Run(name, func(t tb) {
			et, tag := uniqueType(t)
			qs := offsetQueries(rj, et, tag)
			for _, q := range qs {
				if q.name == name {
					f(t, q, et, tag)
					return
				}
			}
			t.Skipf("store does not offer events %s", name)
		})
	}
}

// uniqueType returns an entity type and a tag no other test uses.
func uniqueType(t tb) (string, string) {
	id := uniqueID(t, "KitQ")
	typ := "KitQ" + id[len("KitQ|"):]
	typ = fmt.Sprintf("T%x", annals.Slice(typ)) + typ[len(typ)-12:]
	return typ, "tag-" + typ
}

func queryCases() []queryRule {
	return []queryRule{
		{"OffsetsAreExclusive", "a query from the offset of an envelope returns the events after it, not it", offsetsAreExclusive},
		{"CurrentQueriesEnd", "a current query ends, and does not return events stored after it started", currentQueriesEnd},
		{"LiveQueriesFollow", "a live query returns events stored after it started, and ends with its context's error", liveQueriesFollow},
		{"EnvelopesCarryMetadata", "envelopes carry the persistence id, sequence number, tags, timestamp, entity type and slice", envelopesCarryMetadata},
		{"ByIDSkipsDeletedEvents", "events by persistence id does not return deleted events", byIDSkipsDeletedEvents},
		{"ByIDLiveEndsAtUpperBound", "live events by persistence id follows new events and ends after the one at its upper bound", byIDLiveEndsAtUpperBound},
		{"PersistenceIDsListedOnce", "persistence ids are listed once each, ascending (or in the store's declared order), paged by after-id and limit, filtered by entity type", persistenceIDsListedOnce},
		{"QueriesFilter", "by slices returns only the entity type and slice range asked, by tag only events with that tag, persistence ids only the type asked (including an id without a separator)", queriesFilter},
		{"PagesAreCrossed", "a query over more events than a store reads at once returns every event once, in order, and ends", pagesAreCrossed},
		{"ConcurrentWritersNoLoss", "with 16 writers over 200 ids and a live query started before them, every event is delivered in per-id order, and none is lost when the query restarts from its last offset", concurrentLive},
	}
}

// offsetsAreExclusive: a query from the offset of an envelope returns the events after it, not it.
func offsetsAreExclusive(t tb, j journal.Journal, rj any, _ Store) {
	et, tag := uniqueType(t)
	qs := offsetQueries(rj, et, tag)
	if len(qs) == 0 {
		t.Skip("store offers neither events by tag nor by slices")
	}
	pid := et + "|a"
	taggedEvents(t, j, pid, 1, 5, tag)
	for _, q := range qs {
		all := collect(t, q.current(testContext(t), query.NoOffset()))
		if len(all) != 5 {
			t.Fatalf("%s from no offset: %v, want 5 events", q.name, idSeqs(all))
		}
		rest := collect(t, q.current(testContext(t), all[1].Offset))
		if got := idSeqs(rest); !slices.Equal(got, idSeqs(all[2:])) {
			t.Errorf("%s after the 2nd event's offset: %v, want %v", q.name, got, idSeqs(all[2:]))
		}
		if n := len(collect(t, q.current(testContext(t), all[4].Offset))); n != 0 {
			t.Errorf("%s after the last offset returned %d events, want 0", q.name, n)
		}
	}
}

// currentQueriesEnd: a current query ends, and does not return events stored after it started.
func currentQueriesEnd(t tb, j journal.Journal, rj any, _ Store) {
	eachOffsetQuery(t, rj, func(t tb, q offsetQuery, et, tag string) {
		pid := et + "|c"
		taggedEvents(t, j, pid, 1, 3, tag)
		n := 0
		for _, err := range q.current(testContext(t), query.NoOffset()) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if n == 1 {
				taggedEvents(t, j, pid, 4, 5, tag)
			}
		}
		if n != 3 {
			t.Errorf("returned %d events, want the 3 stored when it started", n)
		}
	})
}

// liveQueriesFollow: a live query returns events stored after it started, and ends with its context's error.
func liveQueriesFollow(t tb, j journal.Journal, rj any, _ Store) {
	et, tag := uniqueType(t)
	qs := offsetQueries(rj, et, tag)
	if len(qs) == 0 {
		t.Skip("store offers neither events by tag nor by slices")
	}
	for i, q := range qs {
		pid := fmt.Sprintf("%s|l%d", et, i)
		ctx, cancel := context.WithCancel(testContext(t))
		stream := q.live(ctx, query.NoOffset())
		got := make(chan query.Envelope)
		go func() {
			defer close(got)
			for env := range stream.All() {
				got <- env
			}
		}()
		taggedEvents(t, j, pid, 1, 2, tag)
		taggedEvents(t, j, pid, 3, 3, tag)
		var seqs []int64
		for env := range got {
			if env.PersistenceID == pid {
				seqs = append(seqs, env.SequenceNr)
			}
			if len(seqs) == 3 {
				cancel()
			}
		}
		cancel()
		if !slices.Equal(seqs, []int64{1, 2, 3}) {
			t.Errorf("%s live returned %v, want [1 2 3]", q.name, seqs)
		}
		if err := stream.Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s live ended with %v, want context.Canceled", q.name, err)
		}
	}
}

// envelopesCarryMetadata: envelopes carry the persistence id, sequence number, tags, timestamp, entity type and slice.
func envelopesCarryMetadata(t tb, j journal.Journal, rj any, _ Store) {
	et, tag := uniqueType(t)
	qs := offsetQueries(rj, et, tag)
	if len(qs) == 0 {
		t.Skip("store offers neither events by tag nor by slices")
	}
	pid := et + "|m"
	taggedEvents(t, j, pid, 1, 1, tag, "other")
	for _, q := range qs {
		envs := collect(t, q.current(testContext(t), query.NoOffset()))
		if len(envs) != 1 {
			t.Fatalf("%s returned %d events, want 1", q.name, len(envs))
		}
		e := envs[0]
		if e.PersistenceID != pid || e.SequenceNr != 1 || !slices.Equal(e.Tags, []string{tag, "other"}) || e.Timestamp.IsZero() || e.EntityType != et || e.Slice != annals.Slice(pid) || string(e.Payload) != string(ev(pid, 1).Payload) {
			t.Errorf("%s envelope %+v lacks what was stored", q.name, e)
		}
	}
}

// byIDSkipsDeletedEvents: events by persistence id does not return deleted events.
func byIDSkipsDeletedEvents(t tb, j journal.Journal, rj any, _ Store) {
	q := capability[query.EventsByPersistenceIDQuery](t, rj)
	pid := writeFive(t, j)
	deleteTo(t, j, pid, 3)
	envs := collect(t, q.CurrentEventsByPersistenceID(testContext(t), pid, 1, maxSeq))
	if got := len(envs); got != 2 || envs[0].SequenceNr != 4 {
		t.Errorf("current by id after DeleteTo(3) returned %v, want 4 and 5", idSeqs(envs))
	}
}

// byIDLiveEndsAtUpperBound: live events by persistence id follows new events and ends after the one at its upper bound.
func byIDLiveEndsAtUpperBound(t tb, j journal.Journal, rj any, _ Store) {
	q := capability[query.EventsByPersistenceIDQuery](t, rj)
	pid := uniqueID(t, "KitQ")
	mustWrite(t, j, single(pid, 1))
	stream := q.EventsByPersistenceID(testContext(t), pid, 1, 3)
	done := make(chan []int64)
	go func() {
		var seqs []int64
		for env := range stream.All() {
			seqs = append(seqs, env.SequenceNr)
		}
		done <- seqs
	}()
	mustWrite(t, j, single(pid, 2))
	mustWrite(t, j, single(pid, 3), single(pid, 4))
	if seqs := <-done; !slices.Equal(seqs, []int64{1, 2, 3}) {
		t.Errorf("live by id to 3 returned %v, want [1 2 3] and its end", seqs)
	}
	if err := stream.Err(); err != nil {
		t.Errorf("a live query that reached its bound ended with %v, want nil", err)
	}
}

// persistenceIDsListedOnce: persistence ids are listed once each, ascending (or in the store's declared order), paged by after-id and limit, filtered by entity type.
func persistenceIDsListedOnce(t tb, j journal.Journal, rj any, s Store) {
	q := capability[query.PersistenceIDsQuery](t, rj)
	et, _ := uniqueType(t)
	var want []string
	for _, id := range []string{"c", "a", "d", "b", "e"} {
		pid := et + "|" + id
		mustWrite(t, j, single(pid, 1), single(pid, 2))
		want = append(want, pid)
	}
	slices.Sort(want)
	var got []string
	after := ""
	for page := 0; page < 10; page++ {
		ids, err := q.CurrentPersistenceIDs(testContext(t), et, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			break
		}
		if len(ids) > 2 {
			t.Fatalf("page of %d ids, limit 2", len(ids))
		}
		got = append(got, ids...)
		after = ids[len(ids)-1]
	}
	if s.IDsInStoreOrder {
		slices.Sort(got)
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged ids %v, want %v", got, want)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	stream := q.PersistenceIDs(ctx, et)
	var live []string
	for id := range stream.All() {
		live = append(live, id)
		if len(live) == len(want) {
			mustWrite(t, j, single(et+"|f", 1), single(et+"|a", 3), single(et+"|f", 2))
		}
		if len(live) == len(want)+1 {
			cancel()
		}
	}
	if s.IDsInStoreOrder && len(live) == len(want)+1 {
		slices.Sort(live[:len(want)])
	}
	if !slices.Equal(live, append(slices.Clone(want), et+"|f")) {
		t.Errorf("live ids %v, want the %d known, then the new one once", live, len(want))
	}
}

// queriesFilter: by slices returns only the entity type and slice range asked, by tag only events with that tag, persistence ids only the type asked (including an id without a separator).
func queriesFilter(t tb, j journal.Journal, rj any, _ Store) {
	et, tag := uniqueType(t)
	other, _ := uniqueType(t)
	var inLow int
	for i := range 40 {
		pid := fmt.Sprintf("%s|%02d", et, i)
		e1, e2, e3 := ev(pid, 1), ev(pid, 2), ev(pid, 3)
		e1.Tags, e2.Tags = []string{tag}, []string{"not-" + tag}
		mustWrite(t, j, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{e1, e2, e3}})
		if annals.Slice(pid) < 512 {
			inLow++
		}
	}
	mustWrite(t, j, single(other+"|x", 1), single(et, 1))
	if q, ok := rj.(query.EventsBySlicesQuery); ok {
		envs := collect(t, q.CurrentEventsBySlices(testContext(t), et, 0, 511, query.NoOffset()))
		n := 0
		for _, e := range envs {
			if e.EntityType != et || e.Slice > 511 {
				t.Errorf("by slices 0-511 of %s returned %s (slice %d, type %s)", et, e.PersistenceID, e.Slice, e.EntityType)
			}
			if e.PersistenceID != et {
				n++
			}
		}
		if want := 3 * inLow; n != want {
			t.Errorf("by slices 0-511 returned %d events of the %d ids in range, want %d", n, inLow, want)
		}
	}
	if q, ok := rj.(query.EventsByTagQuery); ok {
		envs := collect(t, q.CurrentEventsByTag(testContext(t), tag, query.NoOffset()))
		for _, e := range envs {
			if !slices.Contains(e.Tags, tag) {
				t.Errorf("by tag %s returned %s#%d tagged %v", tag, e.PersistenceID, e.SequenceNr, e.Tags)
			}
		}
		if len(envs) != 40 {
			t.Errorf("by tag returned %d events, want 40", len(envs))
		}
	}
	if q, ok := rj.(query.PersistenceIDsQuery); ok {
		ids, err := q.CurrentPersistenceIDs(testContext(t), et, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != 41 || !slices.Contains(ids, et) || slices.Contains(ids, other+"|x") {
			t.Errorf("ids of type %s: %d of them (%v…), want the 40 of the type and the id %q", et, len(ids), ids[:min(3, len(ids))], et)
		}
	}
}

// pagesAreCrossed: a query over more events than a store reads at once returns every event once, in order, and ends.
func pagesAreCrossed(t tb, j journal.Journal, rj any, _ Store) {
	eachOffsetQuery(t, rj, func(t tb, q offsetQuery, et, tag string) {
		pid := et + "|big"
		taggedEvents(t, j, pid, 1, 2500, tag)
		n := 0
		var mid query.Offset
		for env, err := range q.current(testContext(t), query.NoOffset()) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if env.SequenceNr != int64(n) {
				t.Fatalf("event %d has sequence number %d", n, env.SequenceNr)
			}
			if n == 1200 {
				mid = env.Offset
			}
			if n == 1 {
				taggedEvents(t, j, pid, 2501, 2600, tag) // after the start: not returned
			}
		}
		if n != 2500 {
			t.Errorf("returned %d events, want the 2,500 stored when it started", n)
		}
		if rest := len(collect(t, q.current(testContext(t), mid))); rest != 1400 {
			t.Errorf("after event 1,200 returned %d events, want 1,400", rest)
		}
	})
}

func concurrentLive(t tb, j journal.Journal, rj any, _ Store) {
	const writers, ids, perID = 16, 200, 5
	const total = ids * perID
	eachOffsetQuery(t, rj, func(t tb, q offsetQuery, et, tag string) {
		ctx := testContext(t)
		// The first query stops after a third of the events; the second
		// resumes from its last offset.
		firstCtx, stopFirst := context.WithCancel(ctx)
		defer stopFirst()
		first := q.live(firstCtx, query.NoOffset())
		firstDone := make(chan []query.Envelope)
		go func() {
			var envs []query.Envelope
			for env := range first.All() {
				envs = append(envs, env)
				if len(envs) == total/3 {
					break
				}
			}
			firstDone <- envs
		}()
		// The writers report through errs, and are waited for however the
		// rule ends: none may call t after it has returned.
		writeCtx, stopWriters := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var writeFailed atomic.Bool
		errs := make(chan error, writers)
		defer func() {
			stopWriters()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("write: %v", err)
			}
		}()
		for w := range writers {
			wg.Go(func() {
				for s := int64(1); s <= perID; s++ {
					for i := w; i < ids; i += writers {
						pid := fmt.Sprintf("%s|%03d", et, i)
						e := ev(pid, s)
						e.Tags = []string{tag}
						res, err := j.Write(writeCtx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{e}}})
						if err == nil && res != nil {
							err = res[0]
						}
						if err != nil {
							if writeCtx.Err() == nil || ctx.Err() != nil {
								writeFailed.Store(true)
								errs <- fmt.Errorf("%s %d: %w", pid, s, err)
							}
							return
						}
					}
				}
			})
		}
		// When the writes fail, the first query waits for events that will
		// not come: it is stopped.
		writersDone := make(chan struct{})
		go func() { wg.Wait(); close(writersDone) }()
		var r1 []query.Envelope
		select {
		case r1 = <-firstDone:
		case <-writersDone:
			if writeFailed.Load() {
				stopFirst()
			}
			r1 = <-firstDone
		}
		if writeFailed.Load() {
			t.FailNow() // the deferred report names the failed writes
		}
		if len(r1) != total/3 {
			t.Fatalf("first live query got %d events before stopping (%v)", len(r1), first.Err())
		}
		secondCtx, stopSecond := context.WithCancel(ctx)
		defer stopSecond()
		second := q.live(secondCtx, r1[len(r1)-1].Offset)
		var r2 []query.Envelope
		seen := map[string]bool{}
		for _, e := range r1 {
			seen[fmt.Sprintf("%s#%d", e.PersistenceID, e.SequenceNr)] = true
		}
		for env := range second.All() {
			r2 = append(r2, env)
			seen[fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr)] = true
			if len(seen) == total {
				stopSecond()
			}
		}
		wg.Wait()
		if len(seen) != total {
			t.Fatalf("the two live queries delivered %d distinct events, want %d (%v)", len(seen), total, second.Err())
		}
		for name, envs := range map[string][]query.Envelope{"first": r1, "second": r2} {
			last := map[string]int64{}
			for _, e := range envs {
				if e.SequenceNr <= last[e.PersistenceID] {
					t.Fatalf("%s query delivered %s %d after %d: per-id order broken", name, e.PersistenceID, e.SequenceNr, last[e.PersistenceID])
				}
				last[e.PersistenceID] = e.SequenceNr
			}
		}
	})
}
