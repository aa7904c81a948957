package kafka_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// idsIn returns n persistence ids of entity type et whose records go to
// partition p of a topic of the given partition count.
func idsIn(et, run string, p int32, partitions, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		pid := et + "|" + run + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		if kafka.Partition(pid, partitions) == p {
			out = append(out, pid)
		}
	}
	return out
}

// TestClaimFencesAnEarlierClaim: two journals (two processes) claim one
// partition in turn. The first one's write sent after the second claimed
// (a writer paused between its ownership check and the produce) is
// refused as fenced and not stored, even at the next free number, where
// the sequence-number check cannot see a second writer; every later
// write under the old claim is refused without being sent; the new
// claim's write at that number is stored; a call mixing writes with no
// claim, under a claim and for an id of another partition settles each
// on its own.
func TestClaimFencesAnEarlierClaim(t *testing.T) {
	onEachBroker(t, "claim", func(t *testing.T, b brokerEnv) {
		const partitions = 4
		topic := b.prefix + "Claimed"
		kafkatest.CreateTopic(t, b.brokers, topic, partitions)
		old := kafkatest.Open(t, b.brokers, b.tables, b.topic("Claimed"))
		next := kafkatest.Open(t, b.brokers, b.tables, b.topic("Claimed"))
		ctx := t.Context()
		ids := idsIn("Claimed", b.prefix, 1, partitions, 3)
		elsewhere := idsIn("Claimed", b.prefix, 2, partitions, 1)[0]
		write := func(j *kafka.Journal, pid string, seq int64, token journal.FenceToken) error {
			t.Helper()
			res, err := j.WriteFenced(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{sized(pid, seq, 10)}}}, []journal.FenceToken{token})
			if err != nil {
				t.Fatalf("WriteFenced %s@%d: outcome unknown: %v", pid, seq, err)
			}
			if res == nil {
				return nil
			}
			return res[0]
		}

		first, err := old.Claim(ctx, b.prefix, topic, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(first.Close)
		if err := write(old, ids[0], 1, first.Token()); err != nil {
			t.Fatalf("write under the only claim: %v", err)
		}
		second, err := next.Claim(ctx, b.prefix, topic, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(second.Close)
		var fe *journal.FencedError
		switch err := write(old, ids[0], 2, first.Token()); {
		case !errors.Is(err, journal.ErrFenced) || !errors.Is(err, journal.ErrRejected):
			t.Errorf("write under the earlier claim after the later one: %v, want ErrFenced and ErrRejected", err)
		case !errors.As(err, &fe) || fe.PersistenceID != ids[0] || fe.Token.Lease != topic+"/1":
			t.Errorf("write under the earlier claim: %v, want a *journal.FencedError naming %s and %s/1", err, ids[0], topic)
		}
		if first.Err() == nil {
			t.Error("the fenced claim's Err is nil")
		}
		if err := write(old, ids[1], 1, first.Token()); !errors.Is(err, journal.ErrFenced) {
			t.Errorf("a later write under the fenced claim: %v, want ErrFenced", err)
		}
		if err := write(next, ids[0], 2, second.Token()); err != nil {
			t.Errorf("the later claim's write at the refused number: %v", err)
		}
		res, err := next.WriteFenced(ctx, []journal.AtomicWrite{
			{PersistenceID: ids[2], Events: []journal.Repr{sized(ids[2], 1, 10)}},
			{PersistenceID: elsewhere, Events: []journal.Repr{sized(elsewhere, 1, 10)}},
			{PersistenceID: elsewhere, Events: []journal.Repr{sized(elsewhere, 1, 10)}},
		}, []journal.FenceToken{second.Token(), second.Token(), {}})
		if err != nil {
			t.Fatalf("a mixed call: outcome unknown: %v", err)
		}
		if len(res) != 3 || res[0] != nil || !errors.Is(res[1], journal.ErrInvalidArgument) || res[2] != nil {
			t.Errorf("a mixed call's results = %v, want [nil, ErrInvalidArgument (another partition), nil]", res)
		}
		if _, err := next.WriteFenced(ctx, []journal.AtomicWrite{{PersistenceID: ids[1], Events: []journal.Repr{sized(ids[1], 1, 10)}}}, nil); !errors.Is(err, journal.ErrInvalidArgument) {
			t.Errorf("WriteFenced with no tokens for one write: %v, want ErrInvalidArgument", err)
		}
		reader := kafkatest.Open(t, b.brokers, b.tables, b.topic("Claimed"))
		for _, c := range []struct {
			pid  string
			want []int64
		}{{ids[0], []int64{1, 2}}, {ids[1], nil}, {ids[2], []int64{1}}, {elsewhere, []int64{1}}} {
			if got := replayedSeqs(t, reader, c.pid); !slices.Equal(got, c.want) {
				t.Errorf("%s holds %v, want %v", c.pid, got, c.want)
			}
		}
		for _, e := range replayedEvents(t, reader, ids[0]) {
			if want := sized(ids[0], e.SequenceNr, 10).Payload; !slices.Equal(e.Payload, want) {
				t.Errorf("%s@%d = %q, want %q", ids[0], e.SequenceNr, e.Payload, want)
			}
		}
	})
}

// TestConcurrentCallsUnderOneClaim: calls under one claim made at once
// run their transactions one at a time, and each gets its own writes'
// results: a conflict only for the write that has one.
func TestConcurrentCallsUnderOneClaim(t *testing.T) {
	onEachBroker(t, "claimshare", func(t *testing.T, b brokerEnv) {
		const partitions, callers = 2, 24
		topic := b.prefix + "Shared"
		kafkatest.CreateTopic(t, b.brokers, topic, partitions)
		j := kafkatest.Open(t, b.brokers, b.tables, b.topic("Shared"))
		ctx := t.Context()
		c, err := j.Claim(ctx, b.prefix, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		ids := idsIn("Shared", b.prefix, 0, partitions, callers)
		results := make([][]error, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i, pid := range ids {
			wg.Go(func() {
				ws := []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{sized(pid, 1, 10)}}}
				if i == 0 { // a conflict of its own: 2 before 1 is fine, 1 again is not
					ws = append(ws, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{sized(pid, 1, 10)}})
				}
				toks := make([]journal.FenceToken, len(ws))
				for k := range toks {
					toks[k] = c.Token()
				}
				results[i], errs[i] = j.WriteFenced(ctx, ws, toks)
			})
		}
		wg.Wait()
		for i, pid := range ids {
			switch {
			case errs[i] != nil:
				t.Errorf("caller %d: outcome unknown: %v", i, errs[i])
			case i == 0 && (len(results[i]) != 2 || results[i][0] != nil || !errors.Is(results[i][1], journal.ErrSequenceConflict)):
				t.Errorf("caller 0: %v, want [nil, a sequence conflict]", results[i])
			case i > 0 && results[i] != nil:
				t.Errorf("caller %d: %v, want stored", i, results[i])
			}
			if got := replayedSeqs(t, j, pid); !slices.Equal(got, []int64{1}) {
				t.Errorf("%s holds %v, want [1]", pid, got)
			}
		}
	})
}
