package cassandra_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/sqlite"
)

// TestProjectionByTagWithOffsetsInSQLite: an exactly-once projection of a
// Cassandra tag into a SQLite read model, its offsets (time-based UUIDs)
// stored in the same SQLite transactions as the model's rows, stopped and
// run again after more writes: every event is handled exactly once.
func TestProjectionByTagWithOffsetsInSQLite(t *testing.T) {
	cs := cassandratest.Open(t, quick()...)
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "model.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	id := offsets.ID{Name: "cassandra-tag"}
	var handled atomic.Int64
	reached := make(chan struct{}, 1)
	var want int64
	run := func(total int64) {
		t.Helper()
		want = total
		p, err := projection.ExactlyOnce(id, projection.ByTag(cs.ReadJournal(), "proj"), sq.Projections(),
			func(ctx context.Context, tx *sql.Tx, env query.Envelope) error {
				if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS model (pid TEXT, seq INTEGER, PRIMARY KEY (pid, seq))`); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO model VALUES (?, ?)`, env.PersistenceID, env.SequenceNr); err != nil {
					return err
				}
				if handled.Add(1) == want {
					reached <- struct{}{}
				}
				return nil
			}, projection.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		<-reached
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
	}
	write := func(from, to int64) {
		for i := range 3 {
			mustWriteAll(t, cs.Journal(), tagged(fmt.Sprintf("Proj|%d", i), from, to, "proj"))
		}
	}
	write(1, 10)
	run(30)
	write(11, 20)
	run(60)
	var rows int64
	if err := sq.Projections().InTx(t.Context(), func(tx *sql.Tx) error {
		return tx.QueryRowContext(t.Context(), `SELECT count(*) FROM model`).Scan(&rows)
	}); err != nil {
		t.Fatal(err)
	}
	if rows != 60 || handled.Load() != 60 {
		t.Errorf("model has %d rows after %d handler calls, want 60 and 60", rows, handled.Load())
	}
	st, err := sq.Projections().Load(t.Context(), id)
	if err != nil || st.Offset.Kind != query.KindTimeUUID {
		t.Errorf("stored offset %v, %v; want a time-based UUID", st.Offset, err)
	}
}

// TestStoredEventsByTagCountsWhatTheDelayHoldsBack: StoredEventsByTag
// returns every row stored after its offset, those the current query
// still holds back for the eventual-consistency delay included, in
// timeuuid order; it is what projection.ByTag's Behind counts.
func TestStoredEventsByTagCountsWhatTheDelayHoldsBack(t *testing.T) {
	cs := cassandratest.Open(t, cassandra.WithEventualConsistencyDelay(time.Hour),
		cassandra.WithFirstTimeBucket(time.Now().Add(-2*time.Hour)))
	rj := cs.ReadJournal()
	mustWriteAll(t, cs.Journal(), tagged("Stored|a", 1, 3, "stored"))
	mustWriteAll(t, cs.Journal(), tagged("Stored|b", 1, 2, "stored"), tagged("Stored|c", 1, 1, "other"))
	stored := func(after query.Offset) (out []string, offsets []query.Offset) {
		t.Helper()
		for env, err := range rj.StoredEventsByTag(t.Context(), "stored", after) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr))
			offsets = append(offsets, env.Offset)
		}
		return out, offsets
	}
	all, offs := stored(query.NoOffset())
	if got := byTag(t, rj, "stored", query.NoOffset()); len(got) != 0 {
		t.Errorf("the current query returned %v within the delay, want nothing", got)
	}
	want := append(seqList("Stored|a", 1, 3), seqList("Stored|b", 1, 2)...)
	if !slices.Equal(all, want) {
		t.Fatalf("StoredEventsByTag from no offset = %v, want %v", all, want)
	}
	for _, c := range []struct {
		after query.Offset
		want  []string
	}{
		{offs[0], want[1:]},
		{offs[2], want[3:]},
		{offs[4], nil},
	} {
		if got, _ := stored(c.after); !slices.Equal(got, c.want) {
			t.Errorf("StoredEventsByTag after %v = %v, want %v", c.after, got, c.want)
		}
	}
	for _, err := range rj.StoredEventsByTag(t.Context(), "stored", query.SequenceOffset(1)) {
		if !errors.Is(err, query.ErrUnsupportedOffset) {
			t.Errorf("from a sequence offset: %v, want ErrUnsupportedOffset", err)
		}
	}
}
