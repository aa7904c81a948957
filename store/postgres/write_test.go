package postgres_test

import (
	"errors"
	"testing"

	"github.com/annals-go/annals/journal"
)

// TestWriteAttributesFailures: a call's atomic writes go in one statement;
// a conflict or refused data in one of them is reported at its index, and
// the others are stored.
func TestWriteAttributesFailures(t *testing.T) {
	t.Parallel()
	s := open(t)
	ctx := t.Context()
	j := s.Journal()
	one := func(pid string, seq int64, tags ...string) journal.AtomicWrite {
		return journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: seq, Payload: []byte("p"), Tags: tags}}}
	}
	if res, err := j.Write(ctx, []journal.AtomicWrite{one("W|taken, (1)", 1)}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	cases := []struct {
		name   string
		writes []journal.AtomicWrite
		bad    int
		check  func(error) bool
	}{
		{"conflict", []journal.AtomicWrite{one("W|a", 1), one("W|taken, (1)", 1), one("W|b", 1, "t")}, 1,
			func(err error) bool {
				var c *journal.ConflictError
				return errors.As(err, &c) && c.PersistenceID == "W|taken, (1)" && c.SequenceNr == 1 && errors.Is(err, journal.ErrRejected)
			}},
		{"refused data", []journal.AtomicWrite{one("W|c", 1), {PersistenceID: "W|d", Events: []journal.Repr{{PersistenceID: "W|d", SequenceNr: 1, Manifest: "nul\x00byte"}}}, one("W|e", 1)}, 1,
			func(err error) bool {
				return errors.Is(err, journal.ErrRejected) && errors.Is(err, journal.ErrInvalidArgument)
			}},
	}
	for _, c := range cases {
		res, err := j.Write(ctx, c.writes)
		if err != nil || len(res) != len(c.writes) {
			t.Fatalf("%s: results %v, error %v", c.name, res, err)
		}
		for i, r := range res {
			if i == c.bad {
				if !c.check(r) {
					t.Errorf("%s: write %d: %v", c.name, i, r)
				}
				continue
			}
			if r != nil {
				t.Errorf("%s: neighbour %d: %v", c.name, i, r)
			}
			if n, _ := j.HighestSequenceNr(ctx, c.writes[i].PersistenceID, 0); n != 1 {
				t.Errorf("%s: neighbour %s not stored", c.name, c.writes[i].PersistenceID)
			}
		}
	}
}
