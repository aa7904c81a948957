package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// durableObj is revision rev of pid's object, its payload value.
func durableObj(pid string, rev int64, value string) durable.Object {
	return durable.Object{PersistenceID: pid, Revision: rev, Payload: []byte(value), SerializerID: 31, Manifest: "test.State", Tag: "test"}
}

// TestDurableState checks the rules of the Cassandra store's own (TestKits
// runs the kit's durable suite): conflicts name the revision the
// lightweight transaction read, racing inserts and a delete racing an
// update have one winner, and the row holds what the type's documentation
// says.
func TestDurableState(t *testing.T) {
	u, ks := cassandratest.URL(t)
	open := func(t *testing.T, opts ...cassandra.Option) *cassandra.Store {
		t.Helper()
		s, err := cassandra.Open(t.Context(), u, opts...)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open(t, cassandra.WithMigrate(true))
	ds := s.DurableState()
	ctx := t.Context()
	upsert := func(t *testing.T, o durable.Object) {
		t.Helper()
		if err := ds.Upsert(ctx, o); err != nil {
			t.Fatalf("Upsert(%s, revision %d): %v", o.PersistenceID, o.Revision, err)
		}
	}

	t.Run("conflicts name the stored revision", func(t *testing.T) {
		pid, empty := "DurableConflict|a", "DurableConflict|empty"
		upsert(t, durableObj(pid, 1, "a"))
		upsert(t, durableObj(pid, 2, "b"))
		for _, c := range []struct {
			call        string
			pid         string
			rev, stored int64
		}{
			{"upsert", pid, 1, 2}, // IF NOT EXISTS on a stored row
			{"upsert", pid, 2, 2},
			{"upsert", pid, 4, 2},
			{"upsert", empty, 2, 0}, // UPDATE of no row
			{"delete", pid, 1, 2},
			{"delete", pid, 2, 2},
			{"delete", pid, 4, 2},
		} {
			var err error
			if c.call == "upsert" {
				err = ds.Upsert(ctx, durableObj(c.pid, c.rev, "x"))
			} else {
				err = ds.Delete(ctx, c.pid, c.rev)
			}
			want := durable.Conflict(c.call, c.pid, c.rev, c.stored)
			if !errors.Is(err, durable.ErrRevisionConflict) || err.Error() != want.Error() {
				t.Errorf("%s(%s, revision %d): %v, want %v", c.call, c.pid, c.rev, err, want)
			}
		}
		wantDurable(t, ds, pid, 2, "b")
		wantDurable(t, ds, empty, 0, "")
	})

	t.Run("racing writers", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			stored int64 // the revision stored before the race
			// calls are the racing calls; each returns its error.
			calls []func(pid string) error
		}{
			{"revision 1 inserts", 0, repeat(8, func(i int) func(string) error {
				return func(pid string) error { return ds.Upsert(ctx, durableObj(pid, 1, fmt.Sprint("w", i))) }
			})},
			{"an update and a delete of revision 1", 1, []func(string) error{
				func(pid string) error { return ds.Upsert(ctx, durableObj(pid, 2, "w0")) },
				func(pid string) error { return ds.Delete(ctx, pid, 2) },
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				// Several rounds, each on an id of its own, so that either
				// side may win some.
				for round := range 5 {
					pid := fmt.Sprintf("DurableRace|%s-%d", strings.ReplaceAll(c.name, " ", "-"), round)
					if c.stored > 0 {
						upsert(t, durableObj(pid, c.stored, "before"))
					}
					errs := make([]error, len(c.calls))
					var wg sync.WaitGroup
					start := make(chan struct{})
					for i, call := range c.calls {
						wg.Go(func() {
							<-start
							errs[i] = call(pid)
						})
					}
					close(start)
					wg.Wait()
					won, unknown := -1, 0
					for i, err := range errs {
						switch {
						case err == nil && won >= 0:
							t.Fatalf("round %d: calls %d and %d both succeeded", round, won, i)
						case err == nil:
							won = i
						case casUnknown(err):
							unknown++ // contention timed the round out: the store's doc calls the outcome unknown
						case !errors.Is(err, durable.ErrRevisionConflict):
							t.Fatalf("round %d: call %d: %v, want nil or ErrRevisionConflict", round, i, err)
						}
					}
					if won < 0 && unknown > 0 {
						t.Logf("round %d: no call answered success; %d timed out under contention, outcome unknown", round, unknown)
						continue
					}
					if won < 0 {
						t.Fatalf("round %d: no call succeeded: %v", round, errs)
					}
					// Every call but the delete stores its own value: the
					// winner's is the object, the delete's is none.
					o, ok, err := ds.Get(ctx, pid)
					switch {
					case err != nil:
						t.Fatal(err)
					case c.stored == 1 && won == 1:
						if ok {
							t.Errorf("round %d: the delete won, and Get returns revision %d", round, o.Revision)
						}
					case !ok || string(o.Payload) != fmt.Sprint("w", won) || o.Revision != c.stored+1:
						t.Errorf("round %d: call %d won, and Get returns revision %d %q (ok %v)", round, won, o.Revision, o.Payload, ok)
					}
				}
			})
		}
	})

	t.Run("row", func(t *testing.T) {
		// The store's clock, in another zone and with nanoseconds.
		at := time.Date(2031, 2, 3, 4, 5, 6, 123456789, time.FixedZone("UTC+1", 3600))
		clocked := open(t, cassandra.WithClock(func() time.Time { return at })).DurableState()
		pid := "DurableRow|r-1"
		type row struct {
			revision, micros  int64
			serID, slice      int32
			manifest, tag, et *string
			payload           *[]byte // nil: null
		}
		read := func(t *testing.T) (row, bool) {
			t.Helper()
			var r row
			err := s.Session().Query(`SELECT revision, write_time_micros, state_ser_id, slice, state_ser_manifest, tag, entity_type, state_payload FROM `+ks+`.durable_state WHERE persistence_id = ?`, pid).
				Scan(&r.revision, &r.micros, &r.serID, &r.slice, &r.manifest, &r.tag, &r.et, &r.payload)
			if errors.Is(err, gocql.ErrNotFound) {
				return row{}, false
			}
			if err != nil {
				t.Fatal(err)
			}
			return r, true
		}
		str := func(p *string) string {
			if p == nil {
				return "<null>"
			}
			return *p
		}

		// Revision 1 without payload, manifest or tag: empty values, not
		// nulls; slice and entity type of the id; the clock's microseconds.
		if err := clocked.Upsert(ctx, durable.Object{PersistenceID: pid, Revision: 1, SerializerID: 5, Timestamp: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		r, ok := read(t)
		if !ok || r.revision != 1 || r.micros != at.UnixMicro() || r.serID != 5 || r.slice != int32(annals.Slice(pid)) ||
			str(r.et) != annals.EntityType(pid) || str(r.manifest) != "" || str(r.tag) != "" || r.payload == nil || len(*r.payload) != 0 {
			t.Errorf("row of revision 1 = revision %d, micros %d, serializer %d, slice %d, entity type %s, manifest %s, tag %s, payload %v (nil %v); want 1, %d, 5, %d, %s, \"\", \"\", empty",
				r.revision, r.micros, r.serID, r.slice, str(r.et), str(r.manifest), str(r.tag), r.payload, r.payload == nil, at.UnixMicro(), annals.Slice(pid), annals.EntityType(pid))
		}
		o, ok, err := ds.Get(ctx, pid)
		want := at.Truncate(time.Microsecond).UTC()
		if err != nil || !ok || !o.Timestamp.Equal(want) || o.Timestamp.Location() != time.UTC || o.Payload == nil || o.Tag != "" || o.Manifest != "" {
			t.Errorf("Get = %+v, %v, %v; want Timestamp %v in UTC, an empty payload, no tag or manifest", o, ok, err, want)
		}

		// Revision 2 changes the row in place.
		if err := clocked.Upsert(ctx, durableObj(pid, 2, "two")); err != nil {
			t.Fatal(err)
		}
		if r, ok := read(t); !ok || r.revision != 2 || r.payload == nil || string(*r.payload) != "two" || str(r.tag) != "test" || str(r.manifest) != "test.State" || r.serID != 31 {
			t.Errorf("row of revision 2 = %+v (tag %s, manifest %s), want revision 2 \"two\" tagged test", r, str(r.tag), str(r.manifest))
		}

		// Delete removes the row: no revision is kept.
		if err := clocked.Delete(ctx, pid, 3); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.Session().Query(`SELECT count(*) FROM `+ks+`.durable_state WHERE persistence_id = ?`, pid).Scan(&n); err != nil || n != 0 {
			t.Errorf("after Delete the id has %d rows (%v), want none", n, err)
		}
	})
}

// repeat returns n functions, f(0) … f(n-1).
func repeat[F any](n int, f func(int) F) []F {
	out := make([]F, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// wantDurable checks pid's object: revision rev with payload value, or
// none when rev is 0.
func wantDurable(t *testing.T, s durable.Store, pid string, rev int64, value string) {
	t.Helper()
	o, ok, err := s.Get(t.Context(), pid)
	switch {
	case err != nil:
		t.Errorf("Get(%s): %v", pid, err)
	case rev == 0 && ok:
		t.Errorf("Get(%s) = revision %d %q, want nothing", pid, o.Revision, o.Payload)
	case rev > 0 && (!ok || o.Revision != rev || string(o.Payload) != value):
		t.Errorf("Get(%s) = revision %d %q (ok %v), want revision %d %q", pid, o.Revision, o.Payload, ok, rev, value)
	}
}

// TestDurableStateSchema: the migrator lists and creates durable_state
// with the other tables in a new keyspace; in a keyspace of an earlier
// Annals (every table but durable_state) Open succeeds, durable-state
// calls fail with ErrSchemaMissing, the migrator reports version 1 with
// one step that creates the table alone, and after it the calls work.
func TestDurableStateSchema(t *testing.T) {
	u, ks := cassandratest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	m, err := cassandra.NewMigrator(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	create := "CREATE TABLE IF NOT EXISTS " + ks + ".durable_state ("
	plan := func(wantCurrent, wantFrom int, wantIn []string, wantCreates int) {
		t.Helper()
		if cur, latest, err := m.SchemaVersion(ctx); err != nil || cur != wantCurrent || latest != cassandra.SchemaVersion {
			t.Fatalf("SchemaVersion = %d, %d, %v; want %d, %d", cur, latest, err, wantCurrent, cassandra.SchemaVersion)
		}
		steps, err := m.PendingMigrations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) != 1 || steps[0].From != wantFrom || steps[0].To != cassandra.SchemaVersion {
			t.Fatalf("PendingMigrations = %+v, want one step %d → %d", steps, wantFrom, cassandra.SchemaVersion)
		}
		for _, s := range wantIn {
			if !strings.Contains(steps[0].SQL, s) {
				t.Errorf("the step lacks %q:\n%s", s, steps[0].SQL)
			}
		}
		if n := strings.Count(steps[0].SQL, "CREATE "); n != wantCreates {
			t.Errorf("the step has %d CREATE statements, want %d:\n%s", n, wantCreates, steps[0].SQL)
		}
	}

	// A new keyspace: the keyspace, the eleven tables, annals_claims,
	// durable_state and cluster_membership among them.
	plan(0, 0, []string{"CREATE KEYSPACE", "CREATE TABLE IF NOT EXISTS " + ks + ".messages (", create,
		"CREATE TABLE IF NOT EXISTS " + ks + ".cluster_membership (", "CREATE TABLE IF NOT EXISTS " + ks + ".annals_claims ("}, 12)
	if _, err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if steps, err := m.PendingMigrations(ctx); err != nil || len(steps) != 0 {
		t.Fatalf("after Migrate: %+v, %v; want nothing pending", steps, err)
	}

	// A keyspace of an earlier Annals.
	s, err := cassandra.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Session().Query(`DROP TABLE ` + ks + `.durable_state`).WithContext(ctx).Exec(); err != nil {
		t.Fatal(err)
	}
	plan(cassandra.SchemaVersion, cassandra.SchemaVersion, []string{create}, 1)
	old, err := cassandra.Open(ctx, u)
	if err != nil {
		t.Fatalf("Open of a keyspace without durable_state: %v", err)
	}
	defer old.Close()
	ds := old.DurableState()
	_, _, getErr := ds.Get(ctx, "Schema|a")
	for call, err := range map[string]error{
		"Get":    getErr,
		"Upsert": ds.Upsert(ctx, durableObj("Schema|a", 1, "a")),
		"Delete": ds.Delete(ctx, "Schema|a", 1),
	} {
		if !errors.Is(err, cassandra.ErrSchemaMissing) || !strings.Contains(err.Error(), "durable_state") {
			t.Errorf("%s without the table: %v, want ErrSchemaMissing naming durable_state", call, err)
		}
	}
	if _, err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ds.Upsert(ctx, durableObj("Schema|a", 1, "a")); err != nil {
		t.Fatalf("Upsert after Migrate: %v", err)
	}
	wantDurable(t, ds, "Schema|a", 1, "a")
}

// casUnknown reports a lightweight transaction whose outcome Cassandra
// could not tell (a write timeout of the CAS write type, or CAS write
// unknown), as racing writers on one partition can meet on a loaded node.
func casUnknown(err error) bool {
	var timeout *gocql.RequestErrWriteTimeout
	var unknown *gocql.RequestErrCASWriteUnknown
	return (errors.As(err, &timeout) && timeout.WriteType == "CAS") || errors.As(err, &unknown)
}
