package storetest

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// OffsetsHarnessFor gives the offsets suite its stores. TB is *testing.T
// under go test (OffsetsHarness, RunOffsets), T under Check
// (OffsetsSuite).
type OffsetsHarnessFor[TB any] struct {
	// New returns an offset store for one rule. The rules use projection
	// ids of their own, so the stores may share a database.
	New func(t TB) offsets.Store
}

// OffsetsHarness gives the offsets suite its stores under go test.
type OffsetsHarness = OffsetsHarnessFor[*testing.T]

// TxOffsetsHarnessFor gives the transactional offsets suite its stores.
// TB is *testing.T under go test (TxOffsetsHarness, RunTxOffsets), T under
// Check (TxOffsetsSuite).
type TxOffsetsHarnessFor[TB, Tx any] struct {
	// New returns a transactional offset store for one rule; the rules
	// use projection ids of their own.
	New func(t TB) offsets.TxStore[Tx]
}

// TxOffsetsHarness gives the transactional offsets suite its stores under
// go test.
type TxOffsetsHarness[Tx any] = TxOffsetsHarnessFor[*testing.T, Tx]

// offsetRule is one rule of the offsets contract.
type offsetRule struct {
	name, rule string
	run        func(t T, s offsets.Store)
}

// offsetRules is the index of the offsets suite's rules.
func offsetRules() []offsetRule {
	return []offsetRule{
		{"UnsavedIsZero", "Load of an instance never saved returns the zero State: no offset, not paused", unsavedIsZero},
		{"OffsetsRoundTrip", "every kind of offset is loaded as it was saved (timestamps to the microsecond, the seen map whole)", offsetsRoundTrip},
		{"SaveKeepsPaused", "SaveOffset keeps the paused flag", saveKeepsPaused},
		{"SetPausedKeepsOffset", "SetPaused keeps the offset", setPausedKeepsOffset},
		{"ResetKeepsPaused", "Reset removes the offset and keeps the paused flag", resetKeepsPaused},
		{"InstancesAreSeparate", "instances that differ in name or key keep their own state", instancesAreSeparate},
		{"ConcurrentSaves", "concurrent saves of different instances each keep their own offset", concurrentSaves},
	}
}

// RunOffsets runs every rule of the offsets.Store contract against
// the stores h.New makes, one named, parallel subtest of t per rule.
func RunOffsets(t *testing.T, h OffsetsHarness) {
	t.Helper()
	runOffsets(testingT{t}, OffsetsHarnessFor[T]{New: forTesting(h.New)})
}

// OffsetsSuite is the offsets suite (RunOffsets' rules) for Check, named
// "offsets".
func OffsetsSuite(h OffsetsHarnessFor[T]) Suite {
	return Suite{name: "offsets", run: func(t T) { runOffsets(t, h) }}
}

func runOffsets(t T, h OffsetsHarnessFor[T]) {
	t.Helper()
	if h.New == nil {
		t.Fatal("storetest: OffsetsHarness.New is nil")
	}
	for _, r := range offsetRules() {
		ruleTest(t, r.name, r.rule, nil, func(t T) { r.run(t, h.New(t)) })
	}
}

// RunTxOffsets runs the offsets suite (RunOffsets) and the rules of
// offsets.TxStore: an offset saved in a transaction is stored when
// the transaction commits and not when it rolls back.
func RunTxOffsets[Tx any](t *testing.T, h TxOffsetsHarness[Tx]) {
	t.Helper()
	runTxOffsets(testingT{t}, TxOffsetsHarnessFor[T, Tx]{New: forTesting(h.New)})
}

// TxOffsetsSuite is the transactional offsets suite (RunTxOffsets' rules)
// for Check, named "offsets".
func TxOffsetsSuite[Tx any](h TxOffsetsHarnessFor[T, Tx]) Suite {
	return Suite{name: "offsets", run: func(t T) { runTxOffsets(t, h) }}
}

func runTxOffsets[Tx any](t T, h TxOffsetsHarnessFor[T, Tx]) {
	t.Helper()
	if h.New == nil {
		t.Fatal("storetest: TxOffsetsHarness.New is nil")
	}
	runOffsets(t, OffsetsHarnessFor[T]{New: func(t T) offsets.Store { return h.New(t) }})
	t.Run("TxCommitsTheOffset", func(t T) {
		t.Parallel()
		s, id, ctx := h.New(t), offsetID(t, "k"), testContext(t)
		o := query.SequenceOffset(7)
		if err := s.InTx(ctx, func(tx Tx) error { return s.SaveOffsetTx(ctx, tx, id, o) }); err != nil {
			t.Fatalf("InTx: %v", err)
		}
		if st := loadState(t, s, id); !sameOffset(st.Offset, o) {
			t.Errorf("after a committed transaction: %+v, want offset %v", st, o)
		}
	})
	t.Run("TxRollbackKeepsTheOffset", func(t T) {
		t.Parallel()
		s, id, ctx := h.New(t), offsetID(t, "k"), testContext(t)
		before := query.SequenceOffset(3)
		if err := s.SaveOffset(ctx, id, before); err != nil {
			t.Fatal(err)
		}
		failed := errors.New("the handler failed")
		err := s.InTx(ctx, func(tx Tx) error {
			if err := s.SaveOffsetTx(ctx, tx, id, query.SequenceOffset(9)); err != nil {
				return err
			}
			return failed
		})
		if !errors.Is(err, failed) {
			t.Errorf("InTx returned %v, want the function's error", err)
		}
		if st := loadState(t, s, id); !sameOffset(st.Offset, before) {
			t.Errorf("after a rolled-back transaction: %+v, want the earlier offset %v", st, before)
		}
	})
}

// offsetID returns a projection id no other test uses.
func offsetID(t T, key string) offsets.ID {
	return offsets.ID{Name: uniqueID(t, "KitOffsets"), Key: key}
}

func loadState(t T, s offsets.Store, id offsets.ID) offsets.State {
	t.Helper()
	st, err := s.Load(testContext(t), id)
	if err != nil {
		t.Fatalf("Load %s: %v", id, err)
	}
	return st
}

// sameOffset compares offsets as stored: timestamps by instant.
func sameOffset(a, b query.Offset) bool {
	return a.Kind == b.Kind && a.Sequence == b.Sequence && a.Timestamp.Equal(b.Timestamp) &&
		a.TimeUUID == b.TimeUUID && maps.Equal(a.Seen, b.Seen)
}

func unsavedIsZero(t T, s offsets.Store) {
	if st := loadState(t, s, offsetID(t, "never")); st.Paused || st.Offset.Kind != query.KindNone {
		t.Errorf("an instance never saved: %+v, want the zero State", st)
	}
}

func offsetsRoundTrip(t T, s offsets.Store) {
	ctx := testContext(t)
	ts := time.Date(2026, 11, 23, 17, 4, 5, 123456000, time.UTC)
	for _, o := range []query.Offset{
		query.SequenceOffset(1),
		query.SequenceOffset(1 << 62),
		query.TimestampOffset(ts, nil),
		query.TimestampOffset(ts, map[string]int64{"A|1": 3, "B|é|2": 1 << 40}),
		query.TimeUUIDOffset([16]byte{0x1e, 0xc9, 0x41, 0x4c, 0x23, 0x2a, 0x11, 0xb2, 0x80, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07}),
	} {
		id := offsetID(t, fmt.Sprint(o.Kind, len(o.Seen)))
		if err := s.SaveOffset(ctx, id, o); err != nil {
			t.Errorf("SaveOffset %v: %v", o, err)
			continue
		}
		if st := loadState(t, s, id); !sameOffset(st.Offset, o) || st.Paused {
			t.Errorf("saved %+v, loaded %+v", o, st)
		}
	}
}

func saveKeepsPaused(t T, s offsets.Store) {
	ctx, id := testContext(t), offsetID(t, "k")
	if err := s.SetPaused(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveOffset(ctx, id, query.SequenceOffset(5)); err != nil {
		t.Fatal(err)
	}
	if st := loadState(t, s, id); !st.Paused || !sameOffset(st.Offset, query.SequenceOffset(5)) {
		t.Errorf("paused, then an offset saved: %+v, want paused at 5", st)
	}
}

func setPausedKeepsOffset(t T, s offsets.Store) {
	ctx, id := testContext(t), offsetID(t, "k")
	if err := s.SaveOffset(ctx, id, query.SequenceOffset(5)); err != nil {
		t.Fatal(err)
	}
	for _, paused := range []bool{true, false} {
		if err := s.SetPaused(ctx, id, paused); err != nil {
			t.Fatal(err)
		}
		if st := loadState(t, s, id); st.Paused != paused || !sameOffset(st.Offset, query.SequenceOffset(5)) {
			t.Errorf("SetPaused(%v): %+v, want the offset 5 kept", paused, st)
		}
	}
}

func resetKeepsPaused(t T, s offsets.Store) {
	ctx, id := testContext(t), offsetID(t, "k")
	if err := s.SaveOffset(ctx, id, query.SequenceOffset(5)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPaused(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := loadState(t, s, id); !st.Paused || st.Offset.Kind != query.KindNone {
		t.Errorf("after Reset: %+v, want no offset, still paused", st)
	}
	if err := s.Reset(ctx, offsetID(t, "never")); err != nil {
		t.Errorf("Reset of an instance never saved: %v, want nil", err)
	}
}

func instancesAreSeparate(t T, s offsets.Store) {
	ctx := testContext(t)
	a := offsetID(t, "0-511")
	b := offsets.ID{Name: a.Name, Key: "512-1023"}
	c := offsets.ID{Name: a.Name + "-other", Key: a.Key}
	for i, id := range []offsets.ID{a, b, c} {
		if err := s.SaveOffset(ctx, id, query.SequenceOffset(int64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetPaused(ctx, b, true); err != nil {
		t.Fatal(err)
	}
	for i, id := range []offsets.ID{a, b, c} {
		if st := loadState(t, s, id); !sameOffset(st.Offset, query.SequenceOffset(int64(i+1))) || st.Paused != (id == b) {
			t.Errorf("%s: %+v, want offset %d, paused %v", id, st, i+1, id == b)
		}
	}
}

func concurrentSaves(t T, s offsets.Store) {
	ctx := testContext(t)
	const n, saves = 8, 20
	ids := make([]offsets.ID, n)
	for i := range ids {
		ids[i] = offsetID(t, fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, id := range ids {
		wg.Go(func() {
			for k := range int64(saves) {
				if err := s.SaveOffset(ctx, id, query.SequenceOffset(int64(i)*1000+k)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("SaveOffset: %v", err)
	}
	for i, id := range ids {
		if st := loadState(t, s, id); !sameOffset(st.Offset, query.SequenceOffset(int64(i)*1000+saves-1)) {
			t.Errorf("%s: %+v, want its last offset %d", id, st, int64(i)*1000+saves-1)
		}
	}
}
