package storetest

import (
	"fmt"
	"maps"
	"slices"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// batchIDs is how many ids one Write call of the batch suite writes: as
// many atomic writes as a journal front puts in one call under group
// commit (engine.DefaultMaxBatchSize).
const batchIDs = 1000

// batchQueryRules is the batch-queries suite: the rules for the queries
// over one Write call of many ids (what group commit makes of 1,000
// entities persisting at once), through s.Journal and s.Queries. Each
// rule runs for each offset-ordered query the read journal offers (by
// tag, by slices); the suite runs when it offers one.
func batchQueryRules(s Store) []rule {
	return bind([]queryRule{
		{"OneCallOffsetsApart", "the events of one Write call of 1,000 ids are returned once each, at offsets of their own: none shares a timestamp offset with another (Pekko's by-slices query fails when more events than its buffer share one)", oneCallOffsetsApart},
		{"ResumesInsideOneCall", "a query from the offset of an event in the middle of one Write call of 1,000 ids returns the events after it, once each", resumesInsideOneCall},
	}, s)
}

// writeBatch writes, in one Write call, one tagged event of each of
// batchIDs ids of type et, then a second event of the first id (so that
// one id has two writes in the call), and returns the events written as
// "id#seq", in the order of the call.
func writeBatch(t tb, j journal.Journal, et, tag string) []string {
	t.Helper()
	var ws []journal.AtomicWrite
	var names []string
	add := func(pid string, seq int64) {
		e := ev(pid, seq)
		e.Tags = []string{tag}
		ws = append(ws, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{e}})
		names = append(names, fmt.Sprintf("%s#%d", pid, seq))
	}
	for i := range batchIDs {
		add(fmt.Sprintf("%s|b-%d", et, i), 1)
	}
	add(et+"|b-0", 2)
	mustWrite(t, j, ws...)
	return names
}

// offsetKey is an envelope's offset without the ids seen at it: two
// envelopes with one key share a position (a timestamp offset's time).
func offsetKey(o query.Offset) string {
	parts := make([]string, 0, len(o.Partitions))
	for _, p := range slices.Sorted(maps.Keys(o.Partitions)) {
		parts = append(parts, fmt.Sprintf("%d:%d", p, o.Partitions[p]))
	}
	if o.Kind == query.KindPartitions { // a record's events apart by what is seen of it
		for _, id := range slices.Sorted(maps.Keys(o.Seen)) {
			parts = append(parts, fmt.Sprintf("%s:%d", id, o.Seen[id]))
		}
	}
	return fmt.Sprintf("%v/%d/%d/%x/%v", o.Kind, o.Sequence, o.Timestamp.UnixNano(), o.TimeUUID, parts)
}

// checkOnce fails t unless envs are the events of want, each once, and
// an id's in order of sequence numbers.
func checkOnce(t tb, envs []query.Envelope, want []string) {
	t.Helper()
	got := map[string]int{}
	last := map[string]int64{}
	for _, env := range envs {
		got[fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr)]++
		if env.SequenceNr <= last[env.PersistenceID] {
			t.Errorf("%s: event %d after event %d", env.PersistenceID, env.SequenceNr, last[env.PersistenceID])
		}
		last[env.PersistenceID] = env.SequenceNr
	}
	missing := 0
	for _, w := range want {
		if got[w] != 1 {
			if missing++; missing <= 3 {
				t.Errorf("%s returned %d times, want once", w, got[w])
			}
		}
	}
	if missing > 3 {
		t.Errorf("%d events in all not returned once", missing)
	}
	if len(envs) != len(want) {
		t.Errorf("returned %d events, want %d", len(envs), len(want))
	}
}

func oneCallOffsetsApart(t tb, j journal.Journal, rj any, _ Store) {
	eachOffsetQuery(t, rj, func(t tb, q offsetQuery, et, tag string) {
		want := writeBatch(t, j, et, tag)
		envs := collect(t, q.current(testContext(t), query.NoOffset()))
		checkOnce(t, envs, want)
		at := map[string]string{}
		shared := 0
		for _, env := range envs {
			k, name := offsetKey(env.Offset), fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr)
			if other, ok := at[k]; ok {
				if shared++; shared <= 3 {
					t.Errorf("%s and %s share offset %s", other, name, env.Offset)
				}
				continue
			}
			at[k] = name
		}
		if shared > 0 {
			t.Errorf("%d of %d events share an offset with an earlier one", shared, len(envs))
		}
	})
}

func resumesInsideOneCall(t tb, j journal.Journal, rj any, _ Store) {
	eachOffsetQuery(t, rj, func(t tb, q offsetQuery, et, tag string) {
		writeBatch(t, j, et, tag)
		envs := collect(t, q.current(testContext(t), query.NoOffset()))
		if len(envs) < batchIDs/2 {
			t.Fatalf("returned %d events, want %d", len(envs), batchIDs+1)
		}
		mid := batchIDs / 2
		var rest []string
		for _, env := range envs[mid+1:] {
			rest = append(rest, fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr))
		}
		checkOnce(t, collect(t, q.current(testContext(t), envs[mid].Offset)), rest)
	})
}
