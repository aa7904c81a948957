package cassandra_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// TestFarNumbers: with the default partitions of 500,000 numbers, a write
// whose first number lies past the partitions a replay reads is stored
// behind a deleted-to mark when the id keeps no events (never written, or
// all deleted), and refused with ErrInvalidArgument, nothing stored, when
// kept events would leave an empty partition between; either way
// HighestSequenceNr and Replay agree with what Write answered. The cases
// include 1,000,001 on a fresh id (two partitions in, which a scan from
// the first partition does not reach), and 2, 499,999 and 500,001.
func TestFarNumbers(t *testing.T) {
	s := cassandratest.Open(t)
	if s.PartitionSize() != cassandra.DefaultPartitionSize {
		t.Fatalf("partition size %d, want the default %d", s.PartitionSize(), cassandra.DefaultPartitionSize)
	}
	j := s.Journal()
	ctx := t.Context()
	markOf := func(t *testing.T, pid string) int64 {
		t.Helper()
		var to int64
		err := s.Session().Query(`SELECT deleted_to FROM `+s.Keyspace()+`.metadata WHERE persistence_id = ?`, pid).Scan(&to)
		if err != nil && !errors.Is(err, gocql.ErrNotFound) {
			t.Fatal(err)
		}
		return to
	}
	for _, c := range []struct {
		name     string
		before   int64 // events 1..before are written first
		deleteTo int64 // then deleted up to this number (0: none)
		from, to int64 // the far write
		refused  bool  // it is refused with ErrInvalidArgument
		mark     int64 // the deleted-to mark afterwards
	}{
		{"fresh id at 2", 0, 0, 2, 2, false, 1},
		{"fresh id at 499,999", 0, 0, 499_999, 500_000, false, 499_998},
		{"fresh id at 500,001", 0, 0, 500_001, 500_001, false, 500_000},
		{"fresh id at 1,000,001", 0, 0, 1_000_001, 1_000_001, false, 1_000_000},
		{"fresh id at 5,000,001", 0, 0, 5_000_001, 5_000_003, false, 5_000_000},
		{"all deleted, then 1,000,001", 3, 3, 1_000_001, 1_000_002, false, 1_000_000},
		{"3 kept, then the next number", 3, 0, 4, 5, false, 0},
		{"3 kept, then the next partition", 3, 0, 500_001, 500_001, false, 0},
		{"3 kept, then 1,000,001", 3, 0, 1_000_001, 1_000_002, true, 0},
		{"2 kept of 3, then 1,000,001", 3, 1, 1_000_001, 1_000_001, true, 1},
		{"3 kept, then 5,000,001", 3, 0, 5_000_001, 5_000_001, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			pid := "Far|" + strings.NewReplacer(" ", "-", ",", "").Replace(c.name)
			if c.before > 0 {
				if res, err := j.Write(ctx, []journal.AtomicWrite{events(pid, 1, c.before)}); res != nil || err != nil {
					t.Fatal(res, err)
				}
			}
			if c.deleteTo > 0 {
				if err := j.DeleteTo(ctx, pid, c.deleteTo); err != nil {
					t.Fatal(err)
				}
			}
			res, err := j.Write(ctx, []journal.AtomicWrite{events(pid, c.from, c.to)})
			if err != nil {
				t.Fatalf("Write: outcome unknown: %v", err)
			}
			kept := seqsFrom(c.deleteTo+1, c.before)
			highest := max(c.before, c.deleteTo)
			if c.refused {
				if len(res) != 1 || !errors.Is(res[0], journal.ErrInvalidArgument) || !errors.Is(res[0], journal.ErrRejected) {
					t.Fatalf("Write = %v, want a rejection wrapping ErrInvalidArgument", res)
				}
				// The message names the id, the numbers and the partitions.
				for _, want := range []string{pid, "partition 0", "empty"} {
					if !strings.Contains(res[0].Error(), want) {
						t.Errorf("rejection %q does not name %q", res[0], want)
					}
				}
			} else {
				if res != nil {
					t.Fatalf("Write = %v, want it stored", res)
				}
				kept, highest = append(kept, seqsFrom(c.from, c.to)...), c.to
			}
			for _, from := range []int64{1, c.deleteTo + 1, c.from, c.to} {
				var want []int64
				for _, seq := range kept {
					if seq >= from {
						want = append(want, seq)
					}
				}
				if got := replaySeqs(t, j, pid, from); !slices.Equal(got, want) {
					t.Errorf("Replay(from=%d) = %v, want %v", from, got, want)
				}
			}
			hints := []int64{0, highest}
			if !c.refused {
				hints = append(hints, c.from-1)
			}
			for _, hint := range hints {
				if n, err := j.HighestSequenceNr(ctx, pid, hint); err != nil || n != highest {
					t.Errorf("HighestSequenceNr(hint %d) = %d, %v; want %d", hint, n, err, highest)
				}
			}
			if got := markOf(t, pid); got != c.mark {
				t.Errorf("deleted_to = %d, want %d", got, c.mark)
			}
		})
	}

}

// seqsFrom returns from, from+1, ..., to (nothing when to < from).
func seqsFrom(from, to int64) []int64 {
	var out []int64
	for seq := from; seq <= to; seq++ {
		out = append(out, seq)
	}
	return out
}
