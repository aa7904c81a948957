package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// layouts are the two layouts.
var layouts = []struct {
	name string
	opts []postgres.Option
}{
	{"annals", nil},
	{"r2dbc", r2dbcOpts},
}

// TestDurableStateTableIsPekkos: on both layouts the durable_state table
// has exactly the columns, types, nullability, defaults and indexes of
// Pekko Persistence R2DBC 1.2.0's, as psql showed them in the fixture;
// Annals' layout adds the change queries' two indexes and no other.
func TestDurableStateTableIsPekkos(t *testing.T) {
	t.Parallel()
	fixturePath(t, "durable_state.schema.txt")
	conn := connect(t)
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			s := open(t, l.opts...)
			want, got := readSchemaFixture(t, "durable_state"), readSchema(t, conn, s.Schema(), "durable_state")
			if l.name == "annals" {
				want.indexes = append(want.indexes,
					`"durable_state_tag_idx" btree ((tags[1]), db_timestamp, revision, persistence_id)`,
					`"durable_state_type_idx" btree (entity_type, db_timestamp, revision, persistence_id)`)
				slices.Sort(want.indexes)
			}
			if !slices.Equal(got.columns, want.columns) {
				t.Errorf("columns:\n got %v\nwant %v", got.columns, want.columns)
			}
			if !slices.Equal(got.indexes, want.indexes) {
				t.Errorf("indexes:\n got %q\nwant %q", got.indexes, want.indexes)
			}
		})
	}
}

// TestDurableStateMigratesFromVersion1: a schema at version 1 (no
// durable_state) is refused by Open until Migrate runs the one step to
// version 2, which adds the table, the step to version 3, which adds the
// change queries' indexes, and the step to version 4 (the membership
// tables); durable state then works.
func TestDurableStateMigratesFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn, _ := pgtest.Schema(t)
	m, err := postgres.NewMigrator(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pending, err := m.PendingMigrations(ctx)
	if err != nil || len(pending) != postgres.SchemaVersion || pending[0].To != 1 {
		t.Fatalf("pending: %+v %v", pending, err)
	}
	conn := connect(t)
	if _, err := conn.Exec(ctx, pending[0].SQL); err != nil { // version 1, as an older Annals made it
		t.Fatal(err)
	}
	if _, err := postgres.Open(ctx, dsn); !errors.Is(err, postgres.ErrSchemaMissing) {
		t.Fatalf("Open of a version 1 schema: %v, want ErrSchemaMissing", err)
	}
	ran, err := m.Migrate(ctx)
	if err != nil || len(ran) != 4 || ran[0].From != 1 || ran[0].To != 2 || ran[1].To != 3 || ran[2].To != 4 || ran[3].To != 5 {
		t.Fatalf("Migrate ran %+v (%v), want the steps 1 → 2 → 3 → 4 → 5", ran, err)
	}
	if cur, latest, err := m.SchemaVersion(ctx); err != nil || cur != postgres.SchemaVersion || latest != postgres.SchemaVersion {
		t.Fatalf("version after Migrate: %d %d %v", cur, latest, err)
	}
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := s.DurableState()
	if err := d.Upsert(ctx, durable.Object{PersistenceID: "P|1", Revision: 1, Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := d.Get(ctx, "P|1"); err != nil || !ok || o.Revision != 1 || string(o.Payload) != "a" {
		t.Errorf("Get = %+v %v %v", o, ok, err)
	}
}

// TestDurableStateWithoutTable: an r2dbc-layout schema whose JVM service
// has no durable_state table opens (the table is not needed by the
// journal), and durable-state calls fail with ErrSchemaMissing.
func TestDurableStateWithoutTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, r2dbcOpts...)
	conn := connect(t)
	if _, err := conn.Exec(ctx, `DROP TABLE `+pgx.Identifier{s.Schema(), "durable_state"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	d := s.DurableState()
	_, _, getErr := d.Get(ctx, "P|1")
	for call, err := range map[string]error{
		"Get":    getErr,
		"Upsert": d.Upsert(ctx, durable.Object{PersistenceID: "P|1", Revision: 1}),
		"Delete": d.Delete(ctx, "P|1", 1),
	} {
		if !errors.Is(err, postgres.ErrSchemaMissing) {
			t.Errorf("%s without durable_state: %v, want ErrSchemaMissing", call, err)
		}
	}
}

// TestR2DBCDurableStatePekkoRows: the durable_state row Pekko wrote (loaded
// with plain INSERTs) reads back through Annals; the id Pekko deleted
// holds nothing; and what Annals writes has the shape of Pekko's row,
// column by column (timestamps aside, checked on their own): an update in
// place of Pekko's row, and a fresh insert of the same id.
func TestR2DBCDurableStatePekkoRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, r2dbcOpts...)
	conn := connect(t)
	loadFixture(t, conn, s.Schema(), "durable_state", "durable_state.jsonl")
	fixture := readRows(t, "durable_state.jsonl")
	if len(fixture) != 1 || fixture[0].values["persistence_id"] != "Profile|p-1" {
		t.Fatalf("durable_state.jsonl: %+v, want the row of Profile|p-1", fixture)
	}
	pekko := fixture[0]
	d := s.DurableState()

	got, ok, err := d.Get(ctx, "Profile|p-1")
	wantPayload := sqlValue(t, "bytea", pekko.values["state_payload"]).([]byte)
	if err != nil || !ok || got.Revision != 3 || got.SerializerID != 31 || got.Manifest != "anchor.Profile$ProfileState" ||
		string(got.Payload) != string(wantPayload) || got.Tag != "profiles" || !got.Timestamp.Equal(rowTime(t, pekko, "db_timestamp")) {
		t.Fatalf("Get(Profile|p-1) = %+v %v %v, want Pekko's revision 3", got, ok, err)
	}
	if string(got.Payload) != `{"name":"Ada Lovelace","updates":3}` {
		t.Errorf("payload %q", got.Payload)
	}
	if got, ok, err := d.Get(ctx, "Profile|p-2"); err != nil || ok {
		t.Errorf("Get(Profile|p-2), deleted by Pekko: %+v %v %v, want nothing", got, ok, err)
	}

	next := durable.Object{PersistenceID: "Profile|p-1", Payload: []byte(`{"name":"Ada Lovelace","updates":4}`), SerializerID: 31, Manifest: "anchor.Profile$ProfileState", Tag: "profiles"}
	cases := []struct {
		name     string
		change   func() error
		revision int64
		after    time.Time // db_timestamp is later than this
	}{
		{"revision 4 updates Pekko's row", func() error {
			o := next
			o.Revision = 4
			return d.Upsert(ctx, o)
		}, 4, rowTime(t, pekko, "db_timestamp")},
		{"revision 1 after a delete inserts", func() error {
			if err := d.Delete(ctx, "Profile|p-1", 5); err != nil {
				return err
			}
			o := next
			o.Revision = 1
			return d.Upsert(ctx, o)
		}, 1, time.Now().Add(-time.Minute)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.change(); err != nil {
				t.Fatal(err)
			}
			rows := dumpRows(t, conn, s.Schema(), "durable_state", `persistence_id = $1`, "Profile|p-1")
			if len(rows) != 1 {
				t.Fatalf("%d rows of Profile|p-1, want 1 (one row per id)", len(rows))
			}
			r := rows[0]
			compareRow(t, "durable_state", r, pekko, "revision", "db_timestamp", "state_payload")
			if rev := rowInt(t, r, "revision"); rev != c.revision {
				t.Errorf("revision %d, want %d", rev, c.revision)
			}
			if p := sqlValue(t, "bytea", r.values["state_payload"]).([]byte); string(p) != string(next.Payload) {
				t.Errorf("state_payload %q, want %q", p, next.Payload)
			}
			if ts := rowTime(t, r, "db_timestamp"); !ts.After(c.after) || ts.After(time.Now().Add(time.Minute)) {
				t.Errorf("db_timestamp %v, want after %v and about now", ts, c.after)
			}
		})
	}
	// Untagged: tags is NULL, as Pekko writes an untagged row.
	if err := d.Upsert(ctx, durable.Object{PersistenceID: "Profile|p-3", Revision: 1, Payload: []byte("{}"), SerializerID: 31, Manifest: "m"}); err != nil {
		t.Fatal(err)
	}
	if rows := dumpRows(t, conn, s.Schema(), "durable_state", `persistence_id = 'Profile|p-3'`); len(rows) != 1 || rows[0].values["tags"] != nil {
		t.Errorf("untagged row %+v, want tags NULL", rows)
	}
}

// TestDurableStateFirstRevision: revision 1 is an INSERT; of writers racing
// to insert it one wins and the others get ErrRevisionConflict (the
// primary key's unique violation, or the row they find); over a stored
// revision it is a conflict and adds no second row.
func TestDurableStateFirstRevision(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s, conn := open(t, l.opts...), connect(t)
			d := s.DurableState()
			const writers = 8
			errs := make([]error, writers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					<-start
					errs[i] = d.Upsert(ctx, durable.Object{PersistenceID: "P|race", Revision: 1, Payload: []byte{byte(i)}})
				})
			}
			close(start)
			wg.Wait()
			won := 0
			for i, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, durable.ErrRevisionConflict):
					t.Errorf("writer %d: %v, want nil or ErrRevisionConflict", i, err)
				}
			}
			if won != 1 {
				t.Errorf("%d writers stored revision 1, want 1", won)
			}
			if err := d.Upsert(ctx, durable.Object{PersistenceID: "P|race", Revision: 2, Payload: []byte("2")}); err != nil {
				t.Fatal(err)
			}
			if err := d.Upsert(ctx, durable.Object{PersistenceID: "P|race", Revision: 1, Payload: []byte("again")}); !errors.Is(err, durable.ErrRevisionConflict) {
				t.Errorf("revision 1 over revision 2: %v, want ErrRevisionConflict", err)
			}
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.Schema(), "durable_state"}.Sanitize()+` WHERE persistence_id = 'P|race'`).Scan(&n); err != nil || n != 1 {
				t.Errorf("%d rows of P|race (%v), want 1", n, err)
			}
		})
	}
}

// TestDurableChangesSeeLateCommits: an object whose transaction began
// before another object's change and committed after a live change query
// returned that change (a writer without NOTIFY, as a JVM service is) is
// still returned, by backtracking, on both layouts and both orderings, and
// no change is returned twice.
func TestDurableChangesSeeLateCommits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts []postgres.Option
	}{
		{"annals, commit order", []postgres.Option{postgres.WithOrdering(postgres.CommitOrder)}},
		{"annals, timestamp order", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder)}},
		{"r2dbc", r2dbcOpts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Backtracking finds a transaction that commits within
			// backtrack-behind of its timestamp: 5s covers this test's
			// commit, which waits for a live query's answer, on a loaded
			// machine.
			opts := append(slices.Clone(c.opts), postgres.WithBacktracking(postgres.DefaultBacktrackWindow, 5*time.Second), postgres.WithPollInterval(50*time.Millisecond))
			s := open(t, opts...)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			et := "Late" + strings.NewReplacer(" ", "", ",", "").Replace(c.name) + fmt.Sprint(time.Now().UnixNano())
			late, early := et+"|late", et+"|early"

			// The late writer's transaction takes its timestamp now.
			tx, err := s.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			insertStateRow(t, tx, s.Schema(), late, nil, "late")

			stream := s.DurableState().ChangesBySlices(ctx, et, 0, annals.NumberOfSlices-1, query.NoOffset())
			got := envelopes(ctx, stream)
			if err := s.DurableState().Upsert(ctx, durable.Object{PersistenceID: early, Revision: 1, Payload: []byte("early"), SerializerID: 31}); err != nil {
				t.Fatal(err)
			}
			var seen []string
			for env := range got {
				seen = append(seen, fmt.Sprintf("%s@%d", env.PersistenceID, env.SequenceNr))
				if env.PersistenceID == early && env.SequenceNr == 1 {
					if err := tx.Commit(ctx); err != nil { // after the query passed its timestamp
						t.Fatal(err)
					}
				}
				if env.PersistenceID == late {
					// One more change: the query goes on after backtracking,
					// without returning either again.
					if err := s.DurableState().Upsert(ctx, durable.Object{PersistenceID: early, Revision: 2, Payload: []byte("e2"), SerializerID: 31}); err != nil {
						t.Fatal(err)
					}
				}
				if len(seen) == 3 {
					cancel()
				}
			}
			want := []string{early + "@1", late + "@1", early + "@2"}
			if !slices.Equal(seen, want) {
				t.Errorf("live changes returned %v, want %v", seen, want)
			}
		})
	}
}

// TestDurableChangesRecreatedEarlier: an object deleted and written again
// with a db_timestamp before the one of its last change the live query
// delivered (a batch stamps rows ahead of the clock; another writer's
// clock may lag) is still delivered, found by backtracking: a state row is
// a duplicate only when it is the revision and stamp last delivered.
func TestDurableChangesRecreatedEarlier(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.WithBacktracking(postgres.DefaultBacktrackWindow, 2*time.Second), postgres.WithPollInterval(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	d := s.DurableState()
	et := fmt.Sprintf("Again%d", time.Now().UnixNano())
	pid := et + "|a"
	stream := d.ChangesBySlices(ctx, et, 0, annals.NumberOfSlices-1, query.NoOffset())
	got := envelopes(ctx, stream)
	upsert := func(rev int64) {
		t.Helper()
		if err := d.Upsert(ctx, durable.Object{PersistenceID: pid, Revision: rev, Payload: []byte("x"), SerializerID: 31}); err != nil {
			t.Fatal(err)
		}
	}
	upsert(1)
	var seen []string
	for env := range got {
		seen = append(seen, fmt.Sprintf("%d:%s", env.SequenceNr, env.Payload))
		if len(seen) == 1 {
			upsert(2)
		}
		if env.SequenceNr == 2 {
			if err := d.Delete(ctx, pid, 3); err != nil {
				t.Fatal(err)
			}
			// Written again, stamped 1 ms before the delivered revision 2.
			insertStateRow(t, s.Pool(), s.Schema(), pid, env.Timestamp.Add(-time.Millisecond), "again")
		}
		if len(seen) == 3 {
			cancel()
		}
	}
	if want := []string{"1:x", "2:x", "1:again"}; !slices.Equal(seen, want) {
		t.Errorf("live changes returned %v, want %v", seen, want)
	}
}

// TestDurableApplyRefusedValueFailsAlone: a change with a value the server
// refuses (a manifest over the column's 255 characters) fails alone with
// durable.ErrInvalidArgument; the batch's other changes are stored, on
// both layouts.
func TestDurableApplyRefusedValueFailsAlone(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			d := open(t, l.opts...).DurableState()
			ctx := t.Context()
			pid := func(k string) string { return fmt.Sprintf("Refused|%s-%d", k, time.Now().UnixNano()) }
			a, long, c := pid("a"), pid("long"), pid("c")
			errs, err := d.Apply(ctx, []durable.Change{
				{Object: durable.Object{PersistenceID: a, Revision: 1, Payload: []byte("a")}},
				{Object: durable.Object{PersistenceID: long, Revision: 1, Payload: []byte("l"), Manifest: strings.Repeat("m", 300)}},
				{Object: durable.Object{PersistenceID: c, Revision: 1, Payload: []byte("c")}},
			})
			if err != nil {
				t.Fatalf("Apply: %v, want the refused change to fail alone", err)
			}
			if errs == nil || errs[0] != nil || !errors.Is(errs[1], durable.ErrInvalidArgument) || errs[2] != nil {
				t.Fatalf("Apply: %v, want [nil, ErrInvalidArgument, nil]", errs)
			}
			for _, id := range []string{a, c} {
				if _, ok, err := d.Get(ctx, id); err != nil || !ok {
					t.Errorf("Get(%s): found %v, %v; want it stored", id, ok, err)
				}
			}
			if _, ok, _ := d.Get(ctx, long); ok {
				t.Errorf("the refused change was stored")
			}
			if err := d.Upsert(ctx, durable.Object{PersistenceID: long, Revision: 1, Manifest: strings.Repeat("m", 300)}); !errors.Is(err, durable.ErrInvalidArgument) {
				t.Errorf("Upsert of the refused value alone: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// insertStateRow inserts revision 1 of pid into the schema's durable_state
// as a JVM writer would (no NOTIFY), stamped at (nil: the transaction's
// time), with the payload.
func insertStateRow(t *testing.T, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, schema, pid string, at any, payload string) {
	t.Helper()
	if _, err := db.Exec(t.Context(), `INSERT INTO `+pgx.Identifier{schema, "durable_state"}.Sanitize()+`
		(slice, entity_type, persistence_id, revision, db_timestamp, state_ser_id, state_ser_manifest, state_payload, tags)
		VALUES ($1, $2, $3, 1, COALESCE($4::timestamptz, transaction_timestamp()), 31, 'm', $5, NULL)`,
		annals.Slice(pid), annals.EntityType(pid), pid, at, []byte(payload)); err != nil {
		t.Fatal(err)
	}
}

// envelopes passes a live stream's envelopes to a channel, closed when the
// stream ends or ctx does.
func envelopes(ctx context.Context, stream *query.Stream[query.Envelope]) <-chan query.Envelope {
	got := make(chan query.Envelope)
	go func() {
		defer close(got)
		for env := range stream.All() {
			select {
			case got <- env:
			case <-ctx.Done():
				return
			}
		}
	}()
	return got
}
