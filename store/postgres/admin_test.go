package postgres_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestAdmin: the operator capabilities on both layouts: the migrator, the
// statistics (delete markers of the r2dbc layout count in the highest
// number only), the backlog, the projection list, purge, and the raw
// baseline (refused on the r2dbc layout).
func TestAdmin(t *testing.T) {
	for _, c := range []struct {
		layout  string // the URL's layout parameter; "" for Annals'
		version int    // the layout's latest schema version
		step0   string // what the first migration's SQL holds
	}{
		{"", postgres.SchemaVersion, "event_journal"},
		{"r2dbc", 1, "event_journal_slice_idx"},
	} {
		t.Run("layout="+c.layout, func(t *testing.T) {
			t.Parallel()
			testAdmin(t, c.layout, c.version, c.step0)
		})
	}
}

func testAdmin(t *testing.T, layout string, version int, step0 string) {
	ctx := t.Context()
	dsn, _ := pgtest.Schema(t)
	if layout != "" {
		dsn = pgtest.WithParam(dsn, "layout", layout)
	}
	m, err := postgres.NewMigrator(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if cur, latest, err := m.SchemaVersion(ctx); err != nil || cur != 0 || latest != version {
		t.Fatalf("version of an empty schema: %d %d %v", cur, latest, err)
	}
	pending, err := m.PendingMigrations(ctx)
	if err != nil || len(pending) != version || pending[0].From != 0 || !strings.Contains(pending[0].SQL, step0) {
		t.Fatalf("pending: %+v %v", pending, err)
	}
	ran, err := m.Migrate(ctx)
	if err != nil || len(ran) != len(pending) {
		t.Fatalf("migrate ran %+v (%v), want %d steps", ran, err, len(pending))
	}
	if ran, err := m.Migrate(ctx); err != nil || len(ran) != 0 {
		t.Fatalf("migrating a current schema ran %+v (%v)", ran, err)
	}
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write := func(pid string, from, to int64, tags ...string) {
		t.Helper()
		w := journal.AtomicWrite{PersistenceID: pid}
		for i := from; i <= to; i++ {
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: i, Payload: []byte("12345"), Tags: tags})
		}
		if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
			t.Fatal(res, err)
		}
	}
	write("A|1", 1, 3, "t")
	write("A|2", 1, 2)
	write("B|1", 1, 4)
	if err := s.Journal().DeleteTo(ctx, "B|1", 4); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "A|1", SequenceNr: 3}, Payload: []byte("snap")}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []admin.TypeStats{
		{EntityType: "A", PersistenceIDs: 2, Events: 5, PayloadBytes: 25, HighestSequenceNr: 3, Snapshots: 1, SnapshotBytes: 4},
		{EntityType: "B", PersistenceIDs: 1, Events: 0, HighestSequenceNr: 4},
	}
	if len(st.EntityTypes) != 2 || st.StorageBytes <= 0 {
		t.Fatalf("stats %+v", st)
	}
	for i, w := range want {
		got := st.EntityTypes[i]
		got.Oldest, got.Newest = w.Oldest, w.Newest
		if got != w {
			t.Errorf("stats of %s: %+v, want %+v", w.EntityType, got, w)
		}
	}

	all := admin.EventFilter{MinSlice: 0, MaxSlice: annals.NumberOfSlices - 1}
	tagged := admin.EventFilter{Tag: "t", MinSlice: 0, MaxSlice: annals.NumberOfSlices - 1}
	var mid query.Offset
	for env, err := range s.Queries().CurrentEventsBySlices(ctx, "A", 0, annals.NumberOfSlices-1, query.NoOffset()) {
		if err != nil {
			t.Fatal(err)
		}
		if env.PersistenceID == "A|2" && env.SequenceNr == 2 {
			mid = env.Offset
		}
	}
	for _, c := range []struct {
		name  string
		after query.Offset
		f     admin.EventFilter
		want  int64
	}{
		{"everything", query.NoOffset(), all, 5},
		{"tagged", query.NoOffset(), tagged, 3},
		{"type B", query.NoOffset(), admin.EventFilter{EntityType: "B", MaxSlice: annals.NumberOfSlices - 1}, 0},
		{"after A|2 event 2", mid, all, 0}, // the event at the offset's own timestamp is seen
		{"at A|2's timestamp, seen before event 2", query.TimestampOffset(mid.Timestamp, map[string]int64{"A|2": 1}), all, 1},
		{"at A|2's timestamp, nothing seen", query.TimestampOffset(mid.Timestamp, nil), all, 1},
	} {
		b, err := s.Backlog(ctx, c.after, c.f)
		if err != nil || b.Events != c.want {
			t.Errorf("backlog %s: %+v (%v), want %d events", c.name, b, err, c.want)
		}
	}

	p := s.Projections()
	if err := p.SaveOffset(ctx, offsets.ID{Name: "p", Key: "0-1023"}, mid); err != nil {
		t.Fatal(err)
	}
	if err := p.SetPaused(ctx, offsets.ID{Name: "p", Key: "0-1023"}, true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetPaused(ctx, offsets.ID{Name: "a", Key: "k"}, false); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListProjections(ctx)
	if err != nil || len(list) != 2 || list[0].ID.Name != "a" || list[1].ID.Name != "p" || !list[1].Paused || !list[1].Offset.Timestamp.Equal(mid.Timestamp) || list[1].Updated.IsZero() {
		t.Errorf("projections %+v (%v)", list, err)
	}

	if err := s.Purge(ctx, []string{"A|1", "B|1", "nobody"}); err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[string]int64{"A|1": 0, "B|1": 0, "A|2": 2} {
		if n, _ := s.Journal().HighestSequenceNr(ctx, pid, 0); n != want {
			t.Errorf("after purge, highest of %s is %d, want %d", pid, n, want)
		}
	}
	if _, ok, _ := s.Snapshots().Load(ctx, "A|1", snapshot.Latest()); ok {
		t.Error("purge left a snapshot")
	}

	if cur, _, err := m.SchemaVersion(ctx); err != nil || cur != version {
		t.Errorf("version of the created schema: %d, %v; want %d", cur, err, version)
	}
	if layout == "r2dbc" {
		if _, err := s.OpenBaseline(ctx); !errors.Is(err, postgres.ErrLayoutUnsupported) {
			t.Errorf("OpenBaseline on the r2dbc layout: %v, want ErrLayoutUnsupported", err)
		}
		return
	}
	b, err := s.OpenBaseline(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.InsertRaw(ctx, []journal.Repr{{PersistenceID: "R|1", SequenceNr: 1, Payload: []byte("x")}, {PersistenceID: "R|1", SequenceNr: 2, Payload: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ReplayRaw(ctx, "R|1", 10); err != nil || n != 2 {
		t.Errorf("raw replay read %d (%v), want 2", n, err)
	}
	if n, err := b.ScanSlicesRaw(ctx, "A", 0, annals.NumberOfSlices-1); err != nil || n != 2 {
		t.Errorf("raw scan read %d (%v), want 2", n, err)
	}
}
