package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
)

// jvmInsert is the plugin's insert of one event (JournalDao's
// insertEventWithTransactionTimestampSql with the default
// db-timestamp-monotonic-increasing = off), as a JVM writer runs it: no
// NOTIFY follows.
const jvmInsert = `INSERT INTO %s
	(slice, entity_type, persistence_id, seq_nr, writer, adapter_manifest, event_ser_id, event_ser_manifest, event_payload, tags, meta_ser_id, meta_ser_manifest, meta_payload, db_timestamp)
	VALUES ($1, $2, $3, $4, 'jvm', '', 31, 'anchor.Fixture$Added', '{}'::bytea, NULL, NULL, NULL, NULL,
		GREATEST(transaction_timestamp(), (SELECT db_timestamp + '1 microsecond'::interval FROM %s WHERE persistence_id = $5 AND seq_nr = $6)))`

// TestR2DBCLiveSeesJVMWriters: a live query by slices on the r2dbc layout
// delivers the events JVM writers insert (they send no NOTIFY: the query
// polls), including an event whose transaction began, and so was stamped,
// before another's but committed after it (the backtracking query finds
// it); each event once, each id's in order.
func TestR2DBCLiveSeesJVMWriters(t *testing.T) {
	t.Parallel()
	// The backtracking query reads 5 s behind the database clock: the late
	// transaction below commits once Jvm|b#1 was delivered, and one that
	// commits later than that after its timestamp may be missed (see
	// WithBacktracking); on a loaded machine the delivery took over 500 ms.
	s := open(t, postgres.WithLayout(postgres.LayoutR2DBC), postgres.WithPollInterval(20*time.Millisecond),
		postgres.WithBacktracking(postgres.DefaultBacktrackWindow, 5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	journalTable := pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()
	insert := fmt.Sprintf(jvmInsert, journalTable, journalTable)
	conn, late := connect(t), connect(t)
	write := func(c *pgx.Conn, pid string, seq int64) {
		t.Helper()
		if _, err := c.Exec(ctx, insert, annals.Slice(pid), annals.EntityType(pid), pid, seq, pid, seq-1); err != nil {
			t.Fatal(err)
		}
	}

	stream := s.Queries().EventsBySlices(ctx, "Jvm", 0, annals.NumberOfSlices-1, query.NoOffset())
	got := make(chan string)
	go func() {
		for env := range stream.All() {
			got <- fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr)
		}
		close(got)
	}()
	expect := func(want ...string) {
		t.Helper()
		seen := map[string]bool{}
		for len(seen) < len(want) {
			select {
			case e, ok := <-got:
				if !ok {
					t.Fatalf("the live query ended: %v", stream.Err())
				}
				if seen[e] {
					t.Fatalf("%s delivered twice", e)
				}
				seen[e] = true
			case <-ctx.Done():
				t.Fatalf("delivered %v, want %v", seen, want)
			}
		}
		for _, w := range want {
			if !seen[w] {
				t.Fatalf("delivered %v, want %v", seen, want)
			}
		}
	}

	write(conn, "Jvm|a", 1)
	expect("Jvm|a#1")

	// A late commit: Jvm|late's transaction is stamped first and commits
	// after Jvm|b#1 was delivered.
	tx, err := late.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, insert, annals.Slice("Jvm|late"), "Jvm", "Jvm|late", 1, "Jvm|late", 0); err != nil {
		t.Fatal(err)
	}
	write(conn, "Jvm|b", 1)
	expect("Jvm|b#1")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	write(conn, "Jvm|a", 2)
	expect("Jvm|late#1", "Jvm|a#2")
	cancel()
	for range got { // drain until the query ends
	}
}
