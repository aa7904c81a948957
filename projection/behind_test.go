package projection_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
)

// behindStore is a store that offers projection sources: its journal, its
// sources over a tag and over an entity type's slices (nil where the store
// has none), and an offset store for them.
type behindStore struct {
	journal journal.Journal
	byTag   func(tag string) projection.Source
	bySlice func(entityType string) projection.Source
	offsets projection.OffsetStore
}

func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "behind.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// behindStores opens each store on demand, so that a store whose server
// is missing skips its own subtests only.
func behindStores() []struct {
	name string
	open func(t *testing.T) behindStore
} {
	return []struct {
		name string
		open func(t *testing.T) behindStore
	}{
		{"memory", func(t *testing.T) behindStore {
			s := memory.New()
			t.Cleanup(func() { s.Close() })
			return behindStore{s.Journal(), func(tag string) projection.Source { return projection.ByTag(s.Queries(), tag) },
				func(typ string) projection.Source { return allSlices(s.Queries(), typ) }, s.Projections()}
		}},
		{"sqlite", func(t *testing.T) behindStore {
			s := openSQLite(t)
			return behindStore{s.Journal(), func(tag string) projection.Source { return projection.ByTag(s.Queries(), tag) },
				func(typ string) projection.Source { return allSlices(s.Queries(), typ) }, s.Projections()}
		}},
		{"postgres", func(t *testing.T) behindStore {
			dsn, _ := pgtest.Schema(t)
			s, err := postgres.Open(t.Context(), dsn, postgres.WithMigrate(true))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return behindStore{s.Journal(), func(tag string) projection.Source { return projection.ByTag(s.Queries(), tag) },
				func(typ string) projection.Source { return allSlices(s.Queries(), typ) }, s.Projections()}
		}},
		{"cassandra", func(t *testing.T) behindStore {
			// A delay shorter than the default 5 s keeps the test short; any
			// delay holds the events back from the live query.
			s := cassandratest.Open(t, cassandra.WithEventualConsistencyDelay(2*time.Second),
				cassandra.WithFirstTimeBucket(time.Now().Add(-2*time.Hour)))
			// Cassandra keeps no projection offsets: they go to SQLite, as the
			// store's documentation recommends.
			return behindStore{s.Journal(), func(tag string) projection.Source { return projection.ByTag(s.ReadJournal(), tag) },
				nil, openSQLite(t).Projections()}
		}},
		{"kafka", func(t *testing.T) behindStore {
			// The journal's topic read by slices; offsets in SQLite, the
			// read model's database.
			_, schema := pgtest.Schema(t)
			j, err := kafka.Open(t.Context(), kafkatest.Fake(t), pgeventualtest.OpenIn(t, schema))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j.Close() })
			rj := j.ReadJournal(50 * time.Millisecond)
			return behindStore{j, nil, func(typ string) projection.Source { return allSlices(rj, typ) }, openSQLite(t).Projections()}
		}},
	}
}

func unique(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestBehindMeansCaughtUpOnEveryStore: on every store that offers
// projection sources, Behind counts every stored event the projection has
// not handled, those a live query still holds back included (Cassandra's
// eventual-consistency delay), so 0 means the read model holds every event
// written before the call.
func TestBehindMeansCaughtUpOnEveryStore(t *testing.T) {
	t.Parallel()
	for _, st := range behindStores() {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.open(t)
			for _, src := range []string{"tag", "slices"} {
				if (src == "slices" && s.bySlice == nil) || (src == "tag" && s.byTag == nil) {
					continue
				}
				t.Run(src, func(t *testing.T) {
					u := unique(t)
					typ, tag := "Behind"+u, "behind-"+u
					source := s.byTag
					if src == "slices" {
						source = func(string) projection.Source { return s.bySlice(typ) }
					}
					behindPromise(t, s.journal, source(tag), s.offsets, typ, tag)
				})
			}
		})
	}
}

// behindPromise writes events, then checks that Behind counts them at once
// (while the projection is not running) and reaches 0 only when the
// handler has seen every one of them (while it runs).
func behindPromise(t *testing.T, j journal.Journal, src projection.Source, offsets projection.OffsetStore, typ, tag string) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pids := []string{typ + "|a", typ + "|b", typ + "|c"}
	writeTagged := func(pid string, from, to int64) {
		t.Helper()
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := from; seq <= to; seq++ {
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: fmt.Appendf(nil, "%d", seq), Tags: []string{tag}})
		}
		if res, err := j.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
			t.Fatalf("write %s: %v %v", pid, res, err)
		}
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	saved := make(chan struct{}, 1)
	p, err := projection.AtLeastOnce(projection.ID{Name: "behind-" + typ}, src, offsets,
		func(_ context.Context, env query.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			handled[fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr)] = true
			return nil
		}, projection.Config{SaveAfter: 1, Logger: quiet.Logger, Hooks: []any{savedHook(saved)}})
	if err != nil {
		t.Fatal(err)
	}
	behind := func(max int64) int64 {
		t.Helper()
		n, err := p.Behind(ctx, max)
		if err != nil {
			t.Fatalf("Behind(%d): %v", max, err)
		}
		return n
	}
	// caughtUp waits, one offset save at a time, until Behind is 0, then
	// checks that the handler has seen every event written.
	caughtUp := func(written map[string]int64) {
		t.Helper()
		for behind(1) > 0 {
			select {
			case <-saved:
			case <-ctx.Done():
				t.Fatalf("Behind never reached 0: %d", behind(0))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for pid, to := range written {
			for seq := int64(1); seq <= to; seq++ {
				if !handled[fmt.Sprintf("%s#%d", pid, seq)] {
					t.Errorf("Behind is 0, but %s#%d was not handled", pid, seq)
				}
			}
		}
	}

	for _, pid := range pids {
		writeTagged(pid, 1, 4)
	}
	for _, c := range []struct{ max, want int64 }{{0, 12}, {1, 1}, {5, 5}} {
		if n := behind(c.max); n != c.want {
			t.Errorf("right after 12 writes, before running: Behind(%d) = %d, want %d", c.max, n, c.want)
		}
	}
	stop := run(t, p)
	caughtUp(map[string]int64{pids[0]: 4, pids[1]: 4, pids[2]: 4})

	// Written while it runs: 0 only once the handler has them.
	writeTagged(pids[1], 5, 6)
	caughtUp(map[string]int64{pids[0]: 4, pids[1]: 6, pids[2]: 4})
	stop()

	// Written while it is stopped: counted at once, then handled.
	writeTagged(pids[2], 5, 7)
	if n := behind(0); n != 3 {
		t.Errorf("right after 3 more writes, stopped: Behind = %d, want 3", n)
	}
	stop = run(t, p)
	defer stop()
	caughtUp(map[string]int64{pids[0]: 4, pids[1]: 6, pids[2]: 7})
}

// savedHook signals offset saves; a signal not yet taken stands for any
// number of saves.
type savedHook chan struct{}

func (h savedHook) OnOffsetSaved(projection.ID, query.Offset, time.Duration) {
	select {
	case h <- struct{}{}:
	default:
	}
}
