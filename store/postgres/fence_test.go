package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/postgres"
)

// TestTakeOverWaitsForFencedWrite: a write whose lease check passed holds
// the lease against a take-over until it commits, so the new owner's
// epoch starts after it; the holder's heartbeat and own acquire, and
// another member's refused acquire, meanwhile do not wait (each bounded
// by a 30 s context, which a wait for the held write would outlast).
// The write is held before its commit by an advisory lock the test holds.
func TestTakeOverWaitsForFencedWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	key := rand.Int64()
	gate := connect(t)
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	s := open(t, postgres.WithBeforeCommitSQL(fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d)`, key)))
	j, m := s.Journal(), s.Membership()
	cluster, pid := fmt.Sprintf("fence-%x", key), fmt.Sprintf("Account|fence-%x", key)
	a, b := membership.Holder{Name: "a", Incarnation: "1"}, membership.Holder{Name: "b", Incarnation: "1"}
	if err := m.Join(ctx, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x:1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(ctx, cluster, "r0", a, membership.MinTTL)
	if err != nil {
		t.Fatal(err)
	}
	tok := journal.FenceToken{Store: m, Cluster: cluster, Lease: "r0", Holder: a.Name, HolderIncarnation: a.Incarnation, Epoch: l.Epoch}
	w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte("1"), Manifest: "m", WriterID: "w"}}}
	wrote := make(chan error, 1)
	go func() {
		res, err := j.WriteFenced(ctx, []journal.AtomicWrite{w}, []journal.FenceToken{tok})
		if err == nil && res != nil {
			err = res[0]
		}
		wrote <- err
	}()
	writer := awaitSession(t, gate, `wait_event = 'advisory' AND query LIKE '%' || $1 || '%'`, fmt.Sprint(key)) // checked and inserted; held before its commit

	hb, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := m.Heartbeat(hb, cluster, a, membership.MinTTL); err != nil {
		t.Fatalf("the holder's heartbeat while its write is in flight: %v, want renewed without waiting", err)
	}
	// Neither a refused acquire nor the holder's own waits for the write:
	// only a change of owner does.
	if _, err := m.Acquire(hb, cluster, "r0", b, time.Minute); !errors.Is(err, membership.ErrHeld) {
		t.Fatalf("another member's acquire of the live lease while the write is in flight: %v, want ErrHeld without waiting", err)
	}
	if again, err := m.Acquire(hb, cluster, "r0", a, membership.MinTTL); err != nil || again.Epoch != l.Epoch {
		t.Fatalf("the holder's own acquire while its write is in flight: %+v, %v; want its lease at epoch %d without waiting", again, err, l.Epoch)
	}
	for { // the lease's term passes on the server's clock
		var live bool
		if err := gate.QueryRow(ctx, `SELECT expires > now() FROM `+pgx.Identifier{s.Schema(), "cluster_leases"}.Sanitize()+` WHERE cluster = $1 AND name = 'r0'`, cluster).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if !live {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := make(chan membership.Lease, 1)
	go func() {
		l, err := m.Acquire(ctx, cluster, "r0", b, time.Minute)
		if err != nil {
			t.Errorf("take-over: %v", err)
		}
		took <- l
	}()
	awaitSession(t, gate, `$1::int = ANY(pg_blocking_pids(pid))`, writer) // the take-over waits for the write
	select {
	case l := <-took:
		t.Fatalf("the take-over returned while the write was in flight: %+v", l)
	default:
	}
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the write under the held lease: %v, want stored", err)
	}
	if l := <-took; l.Owner != b || l.Epoch != tok.Epoch+1 {
		t.Fatalf("take-over after the write: %+v, want b's at epoch %d", l, tok.Epoch+1)
	}
	w.Events[0].SequenceNr = 2
	res, err := j.WriteFenced(ctx, []journal.AtomicWrite{w}, []journal.FenceToken{tok})
	if err != nil || res == nil || !errors.Is(res[0], journal.ErrFenced) {
		t.Fatalf("a write under the old epoch after the take-over: %v, %v; want ErrFenced", res, err)
	}
}

// awaitSession returns the pid of a session of the server that waits on a
// lock and matches the condition cond on pg_stat_activity (with $1 arg).
func awaitSession(t *testing.T, conn *pgx.Conn, cond string, arg any) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pid int
		err := conn.QueryRow(t.Context(), `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND `+cond+` LIMIT 1`, arg).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waits on a lock where %s", cond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
