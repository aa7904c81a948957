package kafka_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// TestEventsBySlices: the topic read by slices gives every event of the
// type once, each id's in order; two halves of the slices give the whole;
// resuming from any envelope's offset gives exactly the events after it,
// inside an atomic write's record too; the live query sees later writes;
// an offset of another kind is refused.
func TestEventsBySlices(t *testing.T) {
	j, _, _ := openOneTopic(t, "Slices")
	rj := j.ReadJournal(10 * time.Millisecond)
	want := map[string][]int64{}
	for i := range 20 {
		pid := fmt.Sprintf("Slices|%x", uint64(i+1)*0x9E3779B97F4A7C15) // spread over the slices
		write(t, j, pid, 1, 3, "a")                                     // one record of three events
		write(t, j, pid, 4, 4, "b")
		want[pid] = []int64{1, 2, 3, 4}
	}
	read := func(min, max int, after query.Offset) []query.Envelope {
		t.Helper()
		var out []query.Envelope
		for env, err := range rj.CurrentEventsBySlices(t.Context(), "Slices", min, max, after) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, env)
		}
		return out
	}
	bySeq := func(envs []query.Envelope) map[string][]int64 {
		got := map[string][]int64{}
		for _, e := range envs {
			got[e.PersistenceID] = append(got[e.PersistenceID], e.SequenceNr)
		}
		return got
	}
	all := read(0, annals.NumberOfSlices-1, query.NoOffset())
	if got := bySeq(all); len(got) != len(want) {
		t.Fatalf("read %d ids, want %d", len(got), len(want))
	} else {
		for pid, seqs := range want {
			if !slices.Equal(got[pid], seqs) {
				t.Errorf("%s: %v, want %v", pid, got[pid], seqs)
			}
		}
	}
	half := annals.NumberOfSlices / 2
	if lo, hi := read(0, half-1, query.NoOffset()), read(half, annals.NumberOfSlices-1, query.NoOffset()); len(lo)+len(hi) != len(all) || len(lo) == 0 || len(hi) == 0 {
		t.Errorf("halves of the slices read %d and %d events, want %d between them", len(lo), len(hi), len(all))
	}
	for i, env := range all {
		if env.Offset.Kind != query.KindPartitions {
			t.Fatalf("envelope %d has offset %s, want a partitions offset", i, env.Offset)
		}
		rest := read(0, annals.NumberOfSlices-1, env.Offset)
		if len(rest) != len(all)-i-1 {
			t.Fatalf("after envelope %d (%s %d, %s): %d events, want %d", i, env.PersistenceID, env.SequenceNr, env.Offset, len(rest), len(all)-i-1)
		}
	}
	last := all[len(all)-1].Offset
	stream := rj.EventsBySlices(t.Context(), "Slices", 0, annals.NumberOfSlices-1, last)
	write(t, j, "Slices|new", 1, 2, "c")
	var live []int64
	for env := range stream.All() {
		live = append(live, env.SequenceNr)
		if len(live) == 2 {
			break
		}
	}
	if !slices.Equal(live, []int64{1, 2}) {
		t.Errorf("live query after the last offset: %v, want the new id's 1 and 2", live)
	}
	for _, err := range rj.CurrentEventsBySlices(t.Context(), "Slices", 0, 1023, query.SequenceOffset(3)) {
		if err == nil {
			t.Error("a sequence offset was accepted")
		}
		break
	}
	var _ journal.Journal = j
}
