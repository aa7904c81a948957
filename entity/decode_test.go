package entity_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/entity/entitytest"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
)

// stray is registered with the test's registry but is not an Event.
type stray struct{ N int }

// TestRecoveryDecodesEachEvent recovers entities whose stored events
// decode in every way a recovery meets: through the registry, through an
// adapter to several events or to none, and failing in the adapter, in the
// registry (a manifest it does not know, a payload it refuses) or as a
// registered value that is not the behavior's event type.
func TestRecoveryDecodesEachEvent(t *testing.T) {
	type stored struct {
		manifest, payload string
	}
	cases := []struct {
		name    string
		events  []stored
		want    int64  // the balance recovered
		wantErr string // a failed recovery's error contains it
	}{
		{name: "registered", events: []stored{{"test.Deposited", `{"Amount":10}`}, {"test.Deposited", `{"Amount":5}`}}, want: 15},
		{name: "adapted to two events", events: []stored{{"test.DepositedTwice", `3`}, {"test.Deposited", `{"Amount":1}`}}, want: 7},
		{name: "adapted to none", events: []stored{{"test.Nothing", `0`}, {"test.Deposited", `{"Amount":4}`}}, want: 4},
		{name: "adapter fails", events: []stored{{"test.Deposited", `{"Amount":4}`}, {"test.DepositedTwice", `"x"`}}, wantErr: `adapter for manifest "test.DepositedTwice", event 2`},
		{name: "not an event", events: []stored{{"test.Stray", `{"N":1}`}}, wantErr: "not the behavior's event type"},
		{name: "unknown manifest", events: []stored{{"test.Deposited", `{"Amount":2}`}, {"test.Unknown", `{}`}}, wantErr: `"test.Unknown"`},
		{name: "payload the registry refuses", events: []stored{{"test.Deposited", `"x"`}}, wantErr: "test.Deposited"},
	}
	b := accountBehavior()
	b.Adapters = map[string]func([]byte) ([]Event, error){
		"test.DepositedTwice": func(p []byte) ([]Event, error) {
			var n int64
			if err := json.Unmarshal(p, &n); err != nil {
				return nil, err
			}
			return []Event{Deposited{n}, Deposited{n}}, nil
		},
		"test.Nothing": func([]byte) ([]Event, error) { return nil, nil },
	}
	for name, mk := range map[string]func(testing.TB) stores{"memory": memoryStores, "sqlite": sqliteStores} {
		t.Run(name, func(t *testing.T) {
			st := mk(t)
			reg := registry(t)
			if err := serialization.RegisterJSON[stray](reg, "test.Stray"); err != nil {
				t.Fatal(err)
			}
			h := entitytest.NewHost(t, st, b, reg)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					id := fmt.Sprint("decode-", strings.ReplaceAll(c.name, " ", "-"))
					pid := annals.PersistenceID(b.EntityType, id)
					w := journal.AtomicWrite{PersistenceID: pid}
					for i, e := range c.events {
						w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: int64(i + 1),
							SerializerID: serialization.JSONID, Manifest: e.manifest, Payload: []byte(e.payload)})
					}
					if res, err := st.Journal.Write(t.Context(), []journal.AtomicWrite{w}); err != nil || journal.Results(res) != nil {
						t.Fatalf("write: %v %v", res, err)
					}
					got, err := balance(t.Context(), h, id)
					if c.wantErr != "" {
						if !errors.Is(err, entity.ErrRecovery) || !strings.Contains(err.Error(), c.wantErr) {
							t.Fatalf("balance: %d, %v; want ErrRecovery containing %q", got, err, c.wantErr)
						}
						return
					}
					if err != nil || got != c.want {
						t.Fatalf("balance: %d, %v; want %d", got, err, c.want)
					}
				})
			}
		})
	}
}
