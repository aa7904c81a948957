package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/query"
)

// The durable-state change queries' rules
// (query.DurableStateChangesBySlicesQuery and
// query.DurableStateChangesByTagQuery). They run in the durable suite, on
// Store.Durable, and are skipped when it offers neither query.
func changeRules() []durableRule {
	return []durableRule{
		{"ChangesAreLatestRevisions", "a current change query returns each object once, at its latest revision, in the order of their last changes, with the stored payload, serializer id, manifest, tag, entity type, slice and timestamp", changesLatest},
		{"ChangesResumeAfterOffset", "a change query from an envelope's offset returns the changes after it, not it, and a later revision of an id returned before", changesResume},
		{"ChangesFilter", "changes by slices return only the entity type's objects in the slice range; changes by tag only the objects whose latest revision has the tag", changesFilter},
		{"ChangesSkipDeleted", "a deleted object is not returned; written again, it is returned at its new revision", changesDeleted},
		{"LiveChangesFollow", "a live change query returns changes stored after it started, an object written again after a delete at its new revision 1, and ends with the context's error", changesLive},
		{"LiveChangesNeverGoBack", "with writers changing objects while a live change query runs, the query returns each id's revisions in ascending order and each id's last revision", changesConcurrent},
		{"ChangesRefuseUnknownOffsets", "a change query from an offset kind the store does not resume from fails with query.ErrUnsupportedOffset", changesBadOffset},
	}
}

// changeQuery is one change query of a store, by slices (over one entity
// type, every slice) or by tag, in one shape.
type changeQuery struct {
	name    string
	current func(ctx context.Context, after query.Offset) func(func(query.Envelope, error) bool)
	live    func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope]
}

// changeQueries returns the change queries s offers over entity type et
// (by slices) and tag, and skips t when it offers none.
func changeQueries(t tb, s durable.Store, et, tag string) []changeQuery {
	t.Helper()
	qs := offeredChangeQueries(s, et, tag)
	if len(qs) == 0 {
		t.Skip("store offers no durable-state change query")
	}
	return qs
}

// offeredChangeQueries returns the change queries s offers over entity
// type et (by slices) and tag.
func offeredChangeQueries(s durable.Store, et, tag string) []changeQuery {
	var qs []changeQuery
	if q, ok := s.(query.DurableStateChangesBySlicesQuery); ok {
		qs = append(qs, changeQuery{"changes by slices",
			func(ctx context.Context, after query.Offset) func(func(query.Envelope, error) bool) {
				return q.CurrentChangesBySlices(ctx, et, 0, annals.NumberOfSlices-1, after)
			},
			func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
				return q.ChangesBySlices(ctx, et, 0, annals.NumberOfSlices-1, after)
			}})
	}
	if q, ok := s.(query.DurableStateChangesByTagQuery); ok {
		qs = append(qs, changeQuery{"changes by tag",
			func(ctx context.Context, after query.Offset) func(func(query.Envelope, error) bool) {
				return q.CurrentChangesByTag(ctx, tag, after)
			},
			func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
				return q.ChangesByTag(ctx, tag, after)
			}})
	}
	return qs
}

// tagged is obj with tag tag.
func tagged(pid string, revision int64, value, tag string) durable.Object {
	o := obj(pid, revision, value)
	o.Tag = tag
	return o
}

// revisions lists envelopes as "id-suffix@revision".
func revisions(envs []query.Envelope) []string {
	var out []string
	for _, e := range envs {
		_, key, _ := strings.Cut(e.PersistenceID, "|")
		out = append(out, fmt.Sprintf("%s@%d", key, e.SequenceNr))
	}
	return out
}

func changesLatest(t tb, s durable.Store) {
	et, tag := uniqueType(t)
	qs := changeQueries(t, s, et, tag)
	a, b := et+"|a", et+"|b"
	upsert(t, s, tagged(a, 1, "a1", tag))
	upsert(t, s, tagged(b, 1, "b1", tag))
	upsert(t, s, tagged(a, 2, "a2", tag))
	for _, q := range qs {
		envs := collect(t, q.current(testContext(t), query.NoOffset()))
		if got, want := revisions(envs), []string{"b@1", "a@2"}; !slices.Equal(got, want) {
			t.Fatalf("%s returned %v, want %v", q.name, got, want)
		}
		e := envs[1]
		if string(e.Payload) != "a2" || e.SerializerID != 31 || e.Manifest != "kit.State" || !slices.Equal(e.Tags, []string{tag}) ||
			e.EntityType != et || e.Slice != annals.Slice(a) || e.Timestamp.IsZero() || e.Timestamp.Location() != e.Timestamp.UTC().Location() {
			t.Errorf("%s envelope %+v lacks what was stored", q.name, e)
		}
		if stored, _ := get(t, s, a); !e.Timestamp.Equal(stored.Timestamp) {
			t.Errorf("%s envelope's timestamp %v, Get's %v: want the same", q.name, e.Timestamp, stored.Timestamp)
		}
		if envs[0].Offset.Kind == query.KindNone || envs[1].Offset.Kind == query.KindNone {
			t.Errorf("%s envelopes carry no offset: %v, %v", q.name, envs[0].Offset, envs[1].Offset)
		}
	}
}

func changesResume(t tb, s durable.Store) {
	et, tag := uniqueType(t)
	qs := changeQueries(t, s, et, tag)
	a, b := et+"|a", et+"|b"
	upsert(t, s, tagged(a, 1, "a1", tag))
	upsert(t, s, tagged(b, 1, "b1", tag))
	for _, q := range qs {
		envs := collect(t, q.current(testContext(t), query.NoOffset()))
		if len(envs) != 2 {
			t.Fatalf("%s returned %v, want a@1 and b@1", q.name, revisions(envs))
		}
		rest := collect(t, q.current(testContext(t), envs[0].Offset))
		if got, want := revisions(rest), []string{"b@1"}; !slices.Equal(got, want) {
			t.Errorf("%s from the first offset returned %v, want %v", q.name, got, want)
		}
		if rest := collect(t, q.current(testContext(t), envs[1].Offset)); len(rest) != 0 {
			t.Errorf("%s from the last offset returned %v, want nothing", q.name, revisions(rest))
		}
	}
	// A later revision of an id returned before comes after the last offset.
	upsert(t, s, tagged(a, 2, "a2", tag))
	for _, q := range qs {
		envs := collect(t, q.current(testContext(t), query.NoOffset()))
		if len(envs) != 2 {
			t.Fatalf("%s returned %v, want b@1 and a@2", q.name, revisions(envs))
		}
		rest := collect(t, q.current(testContext(t), envs[0].Offset))
		if got, want := revisions(rest), []string{"a@2"}; !slices.Equal(got, want) {
			t.Errorf("%s after a's new revision returned %v from b's offset, want %v", q.name, got, want)
		}
	}
}

func changesFilter(t tb, s durable.Store) {
	et, tag := uniqueType(t)
	other, otherTag := uniqueType(t)
	// Two ids of et in different slices, one of another type with the tag,
	// one of et with another tag.
	in := et + "|in"
	var out string
	for i := 0; ; i++ {
		if out = fmt.Sprintf("%s|out%d", et, i); annals.Slice(out) != annals.Slice(in) {
			break
		}
	}
	upsert(t, s, tagged(in, 1, "in", tag))
	upsert(t, s, tagged(out, 1, "out", tag))
	upsert(t, s, tagged(other+"|x", 1, "x", tag))
	upsert(t, s, tagged(et+"|untagged", 1, "u", otherTag))
	upsert(t, s, tagged(et+"|retagged", 1, "r", tag))
	upsert(t, s, tagged(et+"|retagged", 2, "r", otherTag))

	if q, ok := s.(query.DurableStateChangesBySlicesQuery); ok {
		sl := annals.Slice(in)
		envs := collect(t, q.CurrentChangesBySlices(testContext(t), et, sl, sl, query.NoOffset()))
		for _, e := range envs {
			if annals.Slice(e.PersistenceID) != sl || annals.EntityType(e.PersistenceID) != et {
				t.Errorf("changes by slices [%d, %d] of %s returned %s (slice %d)", sl, sl, et, e.PersistenceID, annals.Slice(e.PersistenceID))
			}
		}
		if !slices.ContainsFunc(envs, func(e query.Envelope) bool { return e.PersistenceID == in }) {
			t.Errorf("changes by slices [%d, %d] returned %v, without %s", sl, sl, revisions(envs), in)
		}
		all := collect(t, q.CurrentChangesBySlices(testContext(t), et, 0, annals.NumberOfSlices-1, query.NoOffset()))
		if got, want := revisions(all), []string{"in@1", out[len(et)+1:] + "@1", "untagged@1", "retagged@2"}; !slices.Equal(got, want) {
			t.Errorf("changes by slices of %s returned %v, want %v", et, got, want)
		}
	}
	if q, ok := s.(query.DurableStateChangesByTagQuery); ok {
		envs := collect(t, q.CurrentChangesByTag(testContext(t), tag, query.NoOffset()))
		if got, want := revisions(envs), []string{"in@1", out[len(et)+1:] + "@1", "x@1"}; !slices.Equal(got, want) {
			t.Errorf("changes by tag %s returned %v, want %v (the retagged object's latest revision has another tag)", tag, got, want)
		}
	}
}

func changesDeleted(t tb, s durable.Store) {
	et, tag := uniqueType(t)
	qs := changeQueries(t, s, et, tag)
	a, b := et+"|a", et+"|b"
	upsert(t, s, tagged(a, 1, "a1", tag))
	upsert(t, s, tagged(b, 1, "b1", tag))
	if err := s.Delete(testContext(t), a, 2); err != nil {
		t.Fatalf("Delete(%s, 2): %v", a, err)
	}
	for _, q := range qs {
		if got, want := revisions(collect(t, q.current(testContext(t), query.NoOffset()))), []string{"b@1"}; !slices.Equal(got, want) {
			t.Errorf("%s after a's delete returned %v, want %v", q.name, got, want)
		}
	}
	upsert(t, s, tagged(a, 1, "again", tag))
	last := map[string]query.Offset{}
	for _, q := range qs {
		envs := collect(t, q.current(testContext(t), query.NoOffset()))
		if got, want := revisions(envs), []string{"b@1", "a@1"}; !slices.Equal(got, want) || string(envs[1].Payload) != "again" {
			t.Fatalf("%s after a was written again returned %v, want %v with the new payload", q.name, got, want)
		}
		last[q.name] = envs[1].Offset
	}
	// Deleting the object changed last takes nothing from the position of
	// a query that has passed it: a new change still comes after it.
	if err := s.Delete(testContext(t), a, 2); err != nil {
		t.Fatalf("Delete(%s, 2): %v", a, err)
	}
	c := et + "|c"
	upsert(t, s, tagged(c, 1, "c1", tag))
	for _, q := range qs {
		if got, want := revisions(collect(t, q.current(testContext(t), last[q.name]))), []string{"c@1"}; !slices.Equal(got, want) {
			t.Errorf("%s from the offset of the deleted object's change returned %v, want %v", q.name, got, want)
		}
	}
}

func changesLive(t tb, s durable.Store) {
	et, tag := uniqueType(t)
	qs := changeQueries(t, s, et, tag)
	for i, q := range qs {
		pid := fmt.Sprintf("%s|l%d", et, i)
		upsert(t, s, tagged(pid, 1, "1", tag))
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		got := follow(ctx, q.live(ctx, query.NoOffset()))
		var seen []int64
		for env := range got.c {
			if env.PersistenceID != pid {
				continue // an id of an earlier query
			}
			seen = append(seen, env.SequenceNr)
			switch env.SequenceNr {
			case 1:
				upsert(t, s, tagged(pid, 2, "2", tag))
			case 2:
				upsert(t, s, tagged(pid, 3, "3", tag))
			case 3:
				if len(seen) == 3 { // deleted and written again: revision 1 is new
					if err := s.Delete(ctx, pid, 4); err != nil {
						t.Fatalf("Delete(%s, 4): %v", pid, err)
					}
					upsert(t, s, tagged(pid, 1, "again", tag))
				}
			}
			if len(seen) == 4 {
				cancel()
			}
		}
		cancel()
		if !slices.Equal(seen, []int64{1, 2, 3, 1}) {
			t.Errorf("%s live returned revisions %v, want [1 2 3 1] (1 again after a delete)", q.name, seen)
		}
		if err := got.err(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s live ended with %v, want context.Canceled", q.name, err)
		}
	}
}

// followed is a live stream's envelopes as a channel, for rules that
// wait for them, and the stream's end.
type followed struct {
	c      <-chan query.Envelope
	stream *query.Stream[query.Envelope]
	done   chan struct{}
}

// follow passes the stream's envelopes to a channel until the stream ends;
// once ctx (the stream's context) ends it drops them, so a rule that
// stops reading leaves no goroutine behind. The channel is closed at the
// end.
func follow(ctx context.Context, stream *query.Stream[query.Envelope]) followed {
	c, done := make(chan query.Envelope), make(chan struct{})
	go func() {
		defer close(done)
		defer close(c)
		for env := range stream.All() {
			if ctx.Err() != nil {
				continue // nobody reads: the stream ends with ctx
			}
			select {
			case c <- env:
			case <-ctx.Done():
			}
		}
	}()
	return followed{c: c, stream: stream, done: done}
}

// err waits for the stream's end and returns its error.
func (f followed) err() error {
	<-f.done
	return f.stream.Err()
}

func changesConcurrent(t tb, s durable.Store) {
	const ids, writes = 8, 25
	et, tag := uniqueType(t)
	qs := changeQueries(t, s, et, tag)
	for qi, q := range qs {
		pids := make([]string, ids)
		for i := range pids {
			pids[i] = fmt.Sprintf("%s|c%d-%d", et, qi, i)
		}
		ctx, cancel := context.WithCancel(testContext(t))
		stream := q.live(ctx, query.NoOffset())
		type result struct {
			order map[string][]int64
			bad   string
		}
		done := make(chan result, 1)
		go func() {
			r := result{order: map[string][]int64{}}
			for env := range stream.All() {
				revs := r.order[env.PersistenceID]
				if n := len(revs); n > 0 && env.SequenceNr <= revs[n-1] {
					r.bad = fmt.Sprintf("%s revision %d after %d", env.PersistenceID, env.SequenceNr, revs[n-1])
				}
				r.order[env.PersistenceID] = append(revs, env.SequenceNr)
				if env.SequenceNr == writes && !slices.ContainsFunc(pids, func(p string) bool { return !slices.Contains(r.order[p], writes) }) {
					break // every id's last revision is in
				}
			}
			done <- r
		}()
		var wg sync.WaitGroup
		for _, pid := range pids {
			wg.Go(func() {
				for rev := int64(1); rev <= writes; rev++ {
					if err := s.Upsert(ctx, tagged(pid, rev, fmt.Sprint(rev), tag)); err != nil {
						t.Errorf("Upsert(%s, %d): %v", pid, rev, err)
						return
					}
				}
			})
		}
		wg.Wait()
		var r result
		select {
		case r = <-done:
		case <-ctx.Done():
			t.Fatalf("%s live: the test ended before every id's last revision %d was returned", q.name, writes)
		}
		cancel()
		if r.bad != "" {
			t.Errorf("%s live went back: %s", q.name, r.bad)
		}
		for _, pid := range pids {
			if revs := r.order[pid]; !slices.Contains(revs, writes) {
				t.Errorf("%s live returned %s's revisions %v, without its last, %d", q.name, pid, revs, writes)
			}
		}
	}
}

func changesBadOffset(t tb, s durable.Store) {
	et, tag := uniqueType(t)
	qs := changeQueries(t, s, et, tag)
	// No store resumes changes from a time-based UUID (Cassandra's events
	// by tag offset).
	bad := query.TimeUUIDOffset([16]byte{0x10, 1})
	for _, q := range qs {
		var err error
		for _, e := range q.current(testContext(t), bad) {
			if e != nil {
				err = e
			}
		}
		if !errors.Is(err, query.ErrUnsupportedOffset) {
			t.Errorf("%s from %v ended with %v, want an error wrapping query.ErrUnsupportedOffset", q.name, bad, err)
		}
		ctx, cancel := context.WithCancel(testContext(t))
		stream := q.live(ctx, bad)
		for range stream.All() {
		}
		cancel()
		if err := stream.Err(); !errors.Is(err, query.ErrUnsupportedOffset) {
			t.Errorf("live %s from %v ended with %v, want an error wrapping query.ErrUnsupportedOffset", q.name, bad, err)
		}
	}
}

// The rules of durable.Batcher, skipped for stores that are not one.
func batchRules() []durableRule {
	return []durableRule{
		{"BatchAppliesInOrder", "Apply applies its changes in order, each under Upsert's or Delete's rule: a later change of an id sees an earlier one's revision", batchInOrder},
		{"BatchFailsChangesAlone", "a change of a batch with a stale revision or an invalid argument fails alone, with ErrRevisionConflict or ErrInvalidArgument, and the others are applied", batchFailsAlone},
		{"BatchesRaceForOneID", "of batches racing for revision 1 of one id, exactly one applies it; each batch's other changes are applied", batchRace},
	}
}

func batcher(t tb, s durable.Store) durable.Batcher {
	t.Helper()
	b, ok := s.(durable.Batcher)
	if !ok {
		t.Skip("store is not a durable.Batcher")
	}
	return b
}

func apply(t tb, b durable.Batcher, changes ...durable.Change) []error {
	t.Helper()
	errs, err := b.Apply(testContext(t), changes)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if errs != nil && len(errs) != len(changes) {
		t.Fatalf("Apply returned %d errors for %d changes", len(errs), len(changes))
	}
	return errs
}

func batchInOrder(t tb, s durable.Store) {
	b := batcher(t, s)
	a, d := uniqueID(t, "KitBatch"), uniqueID(t, "KitBatch")
	upsert(t, s, obj(d, 1, "d1"))
	if errs := apply(t, b,
		durable.Change{Object: obj(a, 1, "a1")},
		durable.Change{Object: obj(a, 2, "a2")},
		durable.Change{Object: durable.Object{PersistenceID: d, Revision: 2}, Delete: true},
		durable.Change{Object: obj(d, 1, "d again")},
		durable.Change{Object: obj(a, 3, "a3")},
	); errs != nil {
		t.Fatalf("Apply: %v, want every change applied", errs)
	}
	for pid, want := range map[string]string{a: "a3@3", d: "d again@1"} {
		if o, ok := get(t, s, pid); !ok || fmt.Sprintf("%s@%d", o.Payload, o.Revision) != want {
			t.Errorf("Get(%s) after the batch: %q@%d (found %v), want %s", pid, o.Payload, o.Revision, ok, want)
		}
	}
}

func batchFailsAlone(t tb, s durable.Store) {
	b := batcher(t, s)
	a, c, e := uniqueID(t, "KitBatch"), uniqueID(t, "KitBatch"), uniqueID(t, "KitBatch")
	upsert(t, s, obj(c, 1, "c1"))
	errs := apply(t, b,
		durable.Change{Object: obj(a, 1, "a1")},
		durable.Change{Object: obj(c, 3, "c3")}, // stale: c holds 1
		durable.Change{Object: obj("", 1, "x")}, // invalid
		durable.Change{Object: durable.Object{PersistenceID: c, Revision: 5}, Delete: true},
		durable.Change{Object: obj(e, 1, "e1")},
	)
	want := []error{nil, durable.ErrRevisionConflict, durable.ErrInvalidArgument, durable.ErrRevisionConflict, nil}
	if errs == nil {
		t.Fatalf("Apply returned no errors, want %v", want)
	}
	for i, w := range want {
		if (w == nil) != (errs[i] == nil) || (w != nil && !errors.Is(errs[i], w)) {
			t.Errorf("change %d: %v, want %v", i, errs[i], w)
		}
	}
	for pid, want := range map[string]string{a: "a1@1", c: "c1@1", e: "e1@1"} {
		if o, ok := get(t, s, pid); !ok || fmt.Sprintf("%s@%d", o.Payload, o.Revision) != want {
			t.Errorf("Get(%s) after the batch: %q@%d (found %v), want %s", pid, o.Payload, o.Revision, ok, want)
		}
	}
}

func batchRace(t tb, s durable.Store) {
	const racers = 6
	b := batcher(t, s)
	contested := uniqueID(t, "KitBatch")
	own := make([]string, racers)
	errs := make([][]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		own[i] = uniqueID(t, "KitBatch")
		wg.Go(func() {
			<-start
			e, err := b.Apply(testContext(t), []durable.Change{
				{Object: obj(own[i], 1, "own")},
				{Object: obj(contested, 1, fmt.Sprint(i))},
				{Object: obj(own[i], 2, "own2")},
			})
			if err != nil {
				t.Errorf("racer %d: Apply: %v", i, err)
				return
			}
			errs[i] = e
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, e := range errs {
		if e == nil {
			won++
		} else if e[0] != nil || e[2] != nil || !errors.Is(e[1], durable.ErrRevisionConflict) {
			t.Errorf("racer %d: %v, want only the contested change to fail, with ErrRevisionConflict", i, e)
		}
		if o, ok := get(t, s, own[i]); !ok || o.Revision != 2 {
			t.Errorf("racer %d's own id: revision %d (found %v), want 2", i, o.Revision, ok)
		}
	}
	if won != 1 {
		t.Errorf("%d racers applied the contested revision 1, want exactly 1", won)
	}
}
