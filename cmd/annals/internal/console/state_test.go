package console

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

// TestStateAt: with the demo's account behavior, the timeline folds an
// account's events to a chosen number: through the adapter of the first
// deposit's old manifest, from the latest snapshot at or below the number
// when it decodes (its balance differs from the events' on purpose, to show
// it is used), from the first event when it does not; without a behavior
// for the type the page says why there is no state.
func TestStateAt(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "state.db")
	s, err := stores.New().Open(context.Background(), url, stores.Create)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const pid = "Account|acct-1"
	write(t, s,
		repr(pid, 1, []byte(`{"amt":100}`), serialization.JSONID, bank.ManifestDepositedV1),
		repr(pid, 2, []byte(`{"amount":50}`), serialization.JSONID, bank.ManifestDeposited),
		repr(pid, 3, []byte(`{"amount":30}`), serialization.JSONID, bank.ManifestWithdrawn),
		repr(pid, 4, []byte(`{"amount":5}`), serialization.JSONID, bank.ManifestDeposited),
		repr(pid, 5, []byte(`{"amount":1}`), serialization.JSONID, bank.ManifestWithdrawn),
		repr("Order|o-1", 1, []byte(`{"order":1}`), serialization.JSONID, "Placed"),
	)
	for _, sn := range []struct {
		seq     int64
		payload string
	}{{3, `{"balance":1000,"ops":3}`}, {5, `not json`}} {
		if err := s.Snapshots.Save(context.Background(), snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: sn.seq, Timestamp: time.Now()},
			Payload: []byte(sn.payload), SerializerID: serialization.JSONID, Manifest: bank.ManifestAccount}); err != nil {
			t.Fatal(err)
		}
	}
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	_, hs := newServer(t, s, url, func(o *Options) {
		o.States = map[string]StateFolder{bank.EntityType: BehaviorState(bank.Behavior(), reg)}
		o.NoStateHint = "HINT"
	})
	for _, c := range []struct {
		at                   int64
		balance, ops         string
		fromSnapshot, events int64
		note                 string
	}{
		{2, `"balance": 150`, `"ops": 2`, 0, 2, ""},
		{3, `"balance": 1000`, `"ops": 3`, 3, 0, ""},
		{4, `"balance": 1005`, `"ops": 4`, 3, 1, ""},
		{5, `"balance": 124`, `"ops": 5`, 0, 5, "the snapshot at 5 does not decode"},
		{9, `"balance": 124`, `"ops": 5`, 0, 5, "no stored events after 5"},
	} {
		var d struct {
			StateAt *StateAt `json:"state_at"`
			CanFold bool     `json:"can_fold"`
			Note    string   `json:"state_at_note"`
		}
		getJSON(t, hs.URL+"/api/entity?id="+urlQuery(pid)+"&state="+strconv.FormatInt(c.at, 10), &d)
		st := d.StateAt
		if !d.CanFold || st == nil {
			t.Fatalf("state at %d: %+v", c.at, d)
		}
		if !strings.Contains(st.JSON, c.balance) || !strings.Contains(st.JSON, c.ops) || st.FromSnapshot != c.fromSnapshot || st.Events != c.events {
			t.Errorf("state at %d: %+v, want %s, %s, from snapshot %d, %d events", c.at, st, c.balance, c.ops, c.fromSnapshot, c.events)
		}
		if notes := strings.Join(st.Notes, " "); (c.note == "") != (notes == "") || !strings.Contains(notes, c.note) {
			t.Errorf("state at %d: notes %q, want %q", c.at, notes, c.note)
		}
	}
	// The page: the control, and the state as JSON, escaped.
	code, body, _ := get(t, nil, hs.URL+"/entity?id="+urlQuery(pid)+"&state=4")
	if code != 200 || !strings.Contains(body, `id="state-form"`) || !strings.Contains(body, `id="state-json"`) || !strings.Contains(body, "&#34;balance&#34;: 1005") {
		t.Errorf("entity page with state=4: %d\n%s", code, body)
	}
	// No behavior for the type: no control, a sentence saying why.
	code, body, _ = get(t, nil, hs.URL+"/entity?id="+urlQuery("Order|o-1")+"&state=1")
	if code != 200 || strings.Contains(body, `id="state-form"`) || !strings.Contains(body, "The state cannot be shown") || !strings.Contains(body, "HINT") {
		t.Errorf("entity page of an Order: %d\n%s", code, body)
	}
	if code, _, _ := get(t, nil, hs.URL+"/api/entity?id="+urlQuery(pid)+"&state=x"); code != 400 {
		t.Errorf("state=x: %d, want 400", code)
	}
	// Without States (no --registry demo): the accounts too say why.
	_, plain := newServer(t, s, url, nil)
	if _, body, _ := get(t, nil, plain.URL+"/entity?id="+urlQuery(pid)); !strings.Contains(body, "The state cannot be shown") {
		t.Errorf("entity page without states: %s", body)
	}
}
