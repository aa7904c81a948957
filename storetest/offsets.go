package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// offsetRule is one rule of the offsets contract.
type offsetRule struct {
	name, rule string
	run        func(t tb, s offsets.Store)
}

// offsetRules is the offsets suite: the rules of offsets.Store over
// s.Offsets, and those of offsets.TxStore (an offset saved in a
// transaction is stored when the transaction commits and not when it
// rolls back), skipped when it is not one.
func offsetRules(s Store) []rule {
	var rules []rule
	for _, r := range []offsetRule{
		{"UnsavedIsZero", "Load of an instance never saved returns the zero State: no offset, not paused", unsavedIsZero},
		{"OffsetsRoundTrip", "every kind of offset is loaded as it was saved (timestamps to the microsecond, the seen map whole)", offsetsRoundTrip},
		{"SaveKeepsPaused", "SaveOffset keeps the paused flag", saveKeepsPaused},
		{"SetPausedKeepsOffset", "SetPaused keeps the offset", setPausedKeepsOffset},
		{"ResetKeepsPaused", "Reset removes the offset and keeps the paused flag", resetKeepsPaused},
		{"InstancesAreSeparate", "instances that differ in name or key keep their own state", instancesAreSeparate},
		{"ConcurrentSaves", "concurrent saves of different instances each keep their own offset", concurrentSaves},
		{"TxCommitsTheOffset", "an offset saved in a transaction that commits is stored", txCommits},
		{"TxRollbackKeepsTheOffset", "an offset saved in a transaction that rolls back is not stored: the earlier one stays", txRollsBack},
	} {
		rules = append(rules, rule{r.name, r.rule, func(t tb) { r.run(t, s.Offsets) }})
	}
	return rules
}

func txCommits(t tb, s offsets.Store) {
	x := txStore(t, s)
	id, ctx := offsetID(t, "k"), testContext(t)
	o := query.SequenceOffset(7)
	if err := x.inTx(ctx, func(save func(offsets.ID, query.Offset) error) error { return save(id, o) }); err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if st := loadState(t, s, id); !sameOffset(st.Offset, o) {
		t.Errorf("after a committed transaction: %+v, want offset %v", st, o)
	}
}

func txRollsBack(t tb, s offsets.Store) {
	x := txStore(t, s)
	id, ctx := offsetID(t, "k"), testContext(t)
	before := query.SequenceOffset(3)
	if err := s.SaveOffset(ctx, id, before); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("the handler failed")
	err := x.inTx(ctx, func(save func(offsets.ID, query.Offset) error) error {
		if err := save(id, query.SequenceOffset(9)); err != nil {
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
}

// txOffsets is an offsets.TxStore of a Tx type the kit does not know,
// called through reflection.
type txOffsets struct {
	inTxFn, saveTxFn reflect.Value
	fnType           reflect.Type // func(Tx) error
}

// txStore returns s as an offsets.TxStore of its own Tx type, and skips t
// when it is not one: it has InTx(context.Context, func(Tx) error) error
// and SaveOffsetTx(context.Context, Tx, offsets.ID, query.Offset) error
// of one Tx type.
func txStore(t tb, s offsets.Store) txOffsets {
	t.Helper()
	v := reflect.ValueOf(s)
	in, save := v.MethodByName("InTx"), v.MethodByName("SaveOffsetTx")
	ctxT, errT := reflect.TypeFor[context.Context](), reflect.TypeFor[error]()
	if in.IsValid() && save.IsValid() {
		it := in.Type()
		if it.NumIn() == 2 && it.In(0) == ctxT && it.NumOut() == 1 && it.Out(0) == errT && !it.IsVariadic() {
			fn := it.In(1)
			if fn.Kind() == reflect.Func && fn.NumIn() == 1 && fn.NumOut() == 1 && fn.Out(0) == errT && !fn.IsVariadic() {
				want := reflect.FuncOf([]reflect.Type{ctxT, fn.In(0), reflect.TypeFor[offsets.ID](), reflect.TypeFor[query.Offset]()}, []reflect.Type{errT}, false)
				if save.Type() == want {
					return txOffsets{in, save, fn}
				}
			}
		}
	}
	t.Skip("Store.Offsets is not an offsets.TxStore")
	return txOffsets{}
}

// inTx runs f in a transaction of the store (InTx), with the function
// that saves an offset in that transaction (SaveOffsetTx).
func (x txOffsets) inTx(ctx context.Context, f func(save func(offsets.ID, query.Offset) error) error) error {
	fn := reflect.MakeFunc(x.fnType, func(args []reflect.Value) []reflect.Value {
		err := f(func(id offsets.ID, o query.Offset) error {
			return errorOf(x.saveTxFn.Call([]reflect.Value{reflect.ValueOf(&ctx).Elem(), args[0], reflect.ValueOf(id), reflect.ValueOf(o)})[0])
		})
		return []reflect.Value{reflect.ValueOf(&err).Elem()}
	})
	return errorOf(x.inTxFn.Call([]reflect.Value{reflect.ValueOf(&ctx).Elem(), fn})[0])
}

// errorOf returns the error v holds (nil for a nil error).
func errorOf(v reflect.Value) error {
	err, _ := v.Interface().(error)
	return err
}

// offsetID returns a projection id no other test uses.
func offsetID(t tb, key string) offsets.ID {
	return offsets.ID{Name: uniqueID(t, "KitOffsets"), Key: key}
}

func loadState(t tb, s offsets.Store, id offsets.ID) offsets.State {
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

func unsavedIsZero(t tb, s offsets.Store) {
	if st := loadState(t, s, offsetID(t, "never")); st.Paused || st.Offset.Kind != query.KindNone {
		t.Errorf("an instance never saved: %+v, want the zero State", st)
	}
}

func offsetsRoundTrip(t tb, s offsets.Store) {
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

func saveKeepsPaused(t tb, s offsets.Store) {
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

func setPausedKeepsOffset(t tb, s offsets.Store) {
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

func resetKeepsPaused(t tb, s offsets.Store) {
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

func instancesAreSeparate(t tb, s offsets.Store) {
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

func concurrentSaves(t tb, s offsets.Store) {
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
