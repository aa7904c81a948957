package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/sqlite"
)

func TestMigratorChangesNothingUntilMigrate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	m, err := sqlite.NewMigrator("sqlite:" + path)
	if err != nil {
		t.Fatal(err)
	}
	cur, latest, err := m.SchemaVersion(ctx)
	if err != nil || cur != 0 || latest != sqlite.SchemaVersion {
		t.Fatalf("version of a missing file: %d %d %v", cur, latest, err)
	}
	steps, err := m.PendingMigrations(ctx)
	if err != nil || len(steps) != sqlite.SchemaVersion || steps[0].From != 0 || !strings.Contains(steps[0].SQL, "CREATE TABLE annals_schema") ||
		!strings.Contains(steps[len(steps)-1].SQL, "UPDATE annals_schema SET version") {
		t.Fatalf("pending: %+v %v", steps, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("inspecting created the file: %v", err)
	}
	ran, err := m.Migrate(ctx)
	if err != nil || len(ran) != len(steps) {
		t.Fatalf("migrate: %v %v", ran, err)
	}
	if ran, err := m.Migrate(ctx); err != nil || len(ran) != 0 {
		t.Fatalf("second migrate: %v %v", ran, err)
	}
	if cur, _, err := m.SchemaVersion(ctx); err != nil || cur != sqlite.SchemaVersion {
		t.Fatalf("after migrate: %d %v", cur, err)
	}
	if _, err := sqlite.NewMigrator("sqlite::memory:"); err == nil {
		t.Error("a migrator of :memory:")
	}
}

func write(t *testing.T, j journal.Journal, pid string, from, to int64, ts time.Time, tags ...string) {
	t.Helper()
	w := journal.AtomicWrite{PersistenceID: pid}
	for s := from; s <= to; s++ {
		w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: s, Payload: []byte("0123456789"), SerializerID: 4, Timestamp: ts.Add(time.Duration(s) * time.Second), Tags: tags})
	}
	if res, err := j.Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
}

func TestAdminCapabilities(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j := s.Journal()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write(t, j, "A|1", 1, 4, t0, "x") // orderings 1-4
	write(t, j, "A|2", 1, 2, t0)      // 5-6
	write(t, j, "B|1", 1, 3, t0, "x") // 7-9
	write(t, j, "Gone", 1, 2, t0)     // 10-11, then all deleted
	if err := j.DeleteTo(ctx, "Gone", 2); err != nil {
		t.Fatal(err)
	}
	if err := j.DeleteTo(ctx, "A|1", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "B|1", SequenceNr: 3}, Payload: []byte("abc")}); err != nil {
		t.Fatal(err)
	}

	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.EntityTypes) != 3 || st.StorageBytes <= 0 {
		t.Fatalf("stats %+v", st)
	}
	a, b, gone := st.EntityTypes[0], st.EntityTypes[1], st.EntityTypes[2]
	if a.EntityType != "A" || a.PersistenceIDs != 2 || a.Events != 5 || a.PayloadBytes != 50 || a.HighestSequenceNr != 4 ||
		!a.Oldest.Equal(t0.Add(time.Second)) || !a.Newest.Equal(t0.Add(4*time.Second)) || a.Snapshots != 0 {
		t.Errorf("A: %+v", a)
	}
	if b.Snapshots != 1 || b.SnapshotBytes != 3 || b.Events != 3 {
		t.Errorf("B: %+v", b)
	}
	if gone.EntityType != "Gone" || gone.PersistenceIDs != 1 || gone.Events != 0 || gone.HighestSequenceNr != 2 || !gone.Oldest.IsZero() {
		t.Errorf("Gone: %+v", gone)
	}

	for _, tc := range []struct {
		after query.Offset
		f     admin.EventFilter
		want  int64
	}{
		{query.NoOffset(), admin.EventFilter{MaxSlice: annals.NumberOfSlices - 1}, 8},
		{query.SequenceOffset(5), admin.EventFilter{MaxSlice: annals.NumberOfSlices - 1}, 4},
		{query.SequenceOffset(5), admin.EventFilter{EntityType: "B", MaxSlice: annals.NumberOfSlices - 1}, 3},
		{query.NoOffset(), admin.EventFilter{Tag: "x", MaxSlice: annals.NumberOfSlices - 1}, 6},
		{query.NoOffset(), admin.EventFilter{EntityType: "A", MinSlice: annals.Slice("A|2"), MaxSlice: annals.Slice("A|2")}, 2},
	} {
		bl, err := s.Backlog(ctx, tc.after, tc.f)
		if err != nil || bl.Events != tc.want || bl.Oldest.IsZero() || bl.Newest.Before(bl.Oldest) {
			t.Errorf("backlog after %v of %+v: %+v %v, want %d events", tc.after, tc.f, bl, err, tc.want)
		}
	}
	if bl, err := s.Backlog(ctx, query.SequenceOffset(100), admin.EventFilter{MaxSlice: 1023}); err != nil || bl.Events != 0 || !bl.Oldest.IsZero() {
		t.Errorf("backlog at the end: %+v %v", bl, err)
	}
	if _, err := s.Backlog(ctx, query.TimestampOffset(t0, nil), admin.EventFilter{}); err == nil {
		t.Error("backlog from a timestamp offset")
	}

	p := s.Projections()
	if err := p.SaveOffset(ctx, offsets.ID{Name: "p", Key: "0-511"}, query.SequenceOffset(3)); err != nil {
		t.Fatal(err)
	}
	if err := p.SetPaused(ctx, offsets.ID{Name: "p", Key: "512-1023"}, true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetPaused(ctx, offsets.ID{Name: "p", Key: "0-511"}, false); err != nil {
		t.Fatal(err)
	}
	ins, err := s.ListProjections(ctx)
	if err != nil || len(ins) != 2 || ins[0].ID.Key != "0-511" || ins[0].Offset.Kind != query.KindSequence || ins[0].Offset.Sequence != 3 || ins[0].Paused ||
		ins[1].Offset.Kind != query.KindNone || !ins[1].Paused || ins[0].Updated.IsZero() {
		t.Errorf("projections %+v %v", ins, err)
	}

	// Purge forgets the listed ids entirely, and nothing else.
	if err := s.Purge(ctx, []string{"A|1", "Gone", "B|1", "Nobody"}); err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[string]int64{"A|1": 0, "Gone": 0, "B|1": 0, "A|2": 2} {
		if h, err := j.HighestSequenceNr(ctx, pid, 0); err != nil || h != want {
			t.Errorf("highest of %s after purge: %d %v, want %d", pid, h, err, want)
		}
	}
	for _, err := range s.Queries().CurrentEventsByTag(ctx, "x", query.NoOffset()) {
		t.Errorf("a purged event is still tagged (%v)", err)
	}
	if _, ok, _ := s.Snapshots().Load(ctx, "B|1", snapshot.Latest()); ok {
		t.Error("a purged id's snapshot remains")
	}

	// The raw baseline reads and writes the same tables.
	bo, err := s.OpenBaseline(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bo.Close()
	evs := []journal.Repr{{PersistenceID: "R|1", SequenceNr: 1, Payload: []byte("r")}, {PersistenceID: "R|1", SequenceNr: 2, Payload: []byte("r")}}
	if err := bo.InsertRaw(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if n, err := bo.ReplayRaw(ctx, "R|1", 10); err != nil || n != 2 {
		t.Errorf("raw replay: %d %v", n, err)
	}
	if n, err := bo.ScanSlicesRaw(ctx, "R", 0, 1023); err != nil || n != 2 {
		t.Errorf("raw scan: %d %v", n, err)
	}
	if h, err := j.HighestSequenceNr(ctx, "R|1", 0); err != nil || h != 2 {
		t.Errorf("the journal does not see the raw rows: %d %v", h, err)
	}
}
