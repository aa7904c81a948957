package journal_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/annals-go/annals/journal"
)

func TestConflictErrorWrapsConflictAndRejection(t *testing.T) {
	var err error = &journal.ConflictError{PersistenceID: "A|1", SequenceNr: 7}
	if !errors.Is(err, journal.ErrSequenceConflict) || !errors.Is(err, journal.ErrRejected) {
		t.Errorf("%v must wrap ErrSequenceConflict and ErrRejected", err)
	}
	var ce *journal.ConflictError
	if !errors.As(err, &ce) || ce.SequenceNr != 7 || !strings.Contains(err.Error(), `7 of "A|1"`) {
		t.Errorf("ConflictError %v must name the id and number", err)
	}
}

func TestCheckAtomicWrite(t *testing.T) {
	ev := func(pid string, seq int64) journal.Repr { return journal.Repr{PersistenceID: pid, SequenceNr: seq} }
	tests := []struct {
		name string
		w    journal.AtomicWrite
		want string // "" = valid
	}{
		{"valid single", journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{ev("p", 1)}}, ""},
		{"valid run", journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{ev("p", 4), ev("p", 5), ev("p", 6)}}, ""},
		{"empty id", journal.AtomicWrite{Events: []journal.Repr{ev("", 1)}}, "empty persistence id"},
		{"no events", journal.AtomicWrite{PersistenceID: "p"}, "no events"},
		{"zero", journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{ev("p", 0)}}, "sequence number 0"},
		{"gap", journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{ev("p", 1), ev("p", 3)}}, "not consecutive"},
		{"repeat", journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{ev("p", 1), ev("p", 1)}}, "not consecutive"},
		{"other id", journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{ev("q", 1)}}, `belongs to "q"`},
	}
	for _, tt := range tests {
		err := journal.CheckAtomicWrite(tt.w)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tt.name, err)
		case tt.want != "" && (err == nil || !errors.Is(err, journal.ErrRejected) || !errors.Is(err, journal.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want a rejection naming %q", tt.name, err, tt.want)
		}
	}
}

func TestResultsIsNilWhenAllStored(t *testing.T) {
	if r := journal.Results(make([]error, 3)); r != nil {
		t.Errorf("Results of all-nil = %v, want nil", r)
	}
	errs := []error{nil, journal.ErrRejected}
	if r := journal.Results(errs); len(r) != 2 {
		t.Errorf("Results with a rejection = %v, want the slice", r)
	}
}
