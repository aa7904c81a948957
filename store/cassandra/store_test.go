package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

func events(pid string, from, to int64) journal.AtomicWrite {
	w := journal.AtomicWrite{PersistenceID: pid}
	for seq := from; seq <= to; seq++ {
		w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: fmt.Appendf(nil, "%d", seq), SerializerID: 4})
	}
	return w
}

func replaySeqs(t *testing.T, j journal.Journal, pid string, from int64) []int64 {
	t.Helper()
	var got []int64
	for r, err := range j.Replay(t.Context(), pid, from, 1<<62, 1<<62) {
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Payload) != fmt.Sprint(r.SequenceNr) {
			t.Fatalf("event %d has payload %q", r.SequenceNr, r.Payload)
		}
		got = append(got, r.SequenceNr)
	}
	return got
}

func consecutive(got []int64, from, to int64) bool {
	if int64(len(got)) != to-from+1 {
		return false
	}
	for i, s := range got {
		if s != from+int64(i) {
			return false
		}
	}
	return true
}

// TestPartitions: with partitions of 10 numbers, atomic writes that cross
// boundaries are stored whole in their first event's partition; replay,
// the highest number and deletions find them, also in akka's layout (a
// crossing write in its last event's partition, as Pekko writes it); a
// second writer whose write crosses a boundary differently still gets a
// conflict.
func TestPartitions(t *testing.T) {
	s := cassandratest.Open(t, cassandra.WithPartitionSize(10))
	j := s.Journal()
	ctx := t.Context()
	write := func(ws ...journal.AtomicWrite) []error {
		t.Helper()
		res, err := j.Write(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	t.Run("crossing writes", func(t *testing.T) {
		pid := "Part|crossing"
		// 1–7 in partition 0; 8–14 crosses into 1's range, stored in 0;
		// 15–23 in 1; 24–30 in 2.
		write(events(pid, 1, 7), events(pid, 8, 14), events(pid, 15, 23), events(pid, 24, 30))
		for _, c := range []struct{ pnr, want int64 }{{0, 14}, {1, 9}, {2, 7}} {
			var n int64
			if err := s.Session().Query(`SELECT count(*) FROM `+s.Keyspace()+`.messages WHERE persistence_id = ? AND partition_nr = ?`, pid, c.pnr).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != c.want {
				t.Errorf("partition %d holds %d events, want %d", c.pnr, n, c.want)
			}
		}
		for _, from := range []int64{1, 9, 11, 12, 20, 25} {
			if got := replaySeqs(t, j, pid, from); !consecutive(got, from, 30) {
				t.Errorf("replay from %d = %v", from, got)
			}
		}
		for _, hint := range []int64{0, 12, 29} {
			if n, err := j.HighestSequenceNr(ctx, pid, hint); err != nil || n != 30 {
				t.Errorf("HighestSequenceNr(hint %d) = %d, %v; want 30", hint, n, err)
			}
		}
		if err := j.DeleteTo(ctx, pid, 12); err != nil {
			t.Fatal(err)
		}
		if got := replaySeqs(t, j, pid, 1); !consecutive(got, 13, 30) {
			t.Errorf("replay after DeleteTo(12) = %v, want 13–30", got)
		}
		if n, err := j.HighestSequenceNr(ctx, pid, 0); err != nil || n != 30 {
			t.Errorf("HighestSequenceNr after DeleteTo(12) = %d, %v; want 30", n, err)
		}
	})

	t.Run("conflict across a boundary", func(t *testing.T) {
		pid := "Part|conflict"
		write(events(pid, 1, 8))
		// The second writer's 9–12 crosses into partition 1; the first's
		// 9 stays in 0. Both start at 9: the same partition, one winner.
		if res := write(events(pid, 9, 9)); res != nil {
			t.Fatalf("first writer: %v", res)
		}
		res := write(events(pid, 9, 12))
		var ce *journal.ConflictError
		if len(res) != 1 || !errors.As(res[0], &ce) || ce.SequenceNr != 9 {
			t.Fatalf("second writer: %v, want a conflict at 9", res)
		}
		if got := replaySeqs(t, j, pid, 1); !consecutive(got, 1, 9) {
			t.Errorf("replay = %v, want 1–9", got)
		}
	})

	t.Run("akka layout", func(t *testing.T) {
		pid := "Part|akka"
		// As Pekko writes: 1–8 in 0, the crossing write 9–13 in 1, 14–20 in 1, 21–22 in 2.
		insert := `INSERT INTO ` + s.Keyspace() + `.messages (persistence_id, partition_nr, sequence_nr, timestamp, timebucket, writer_uuid, ser_id, ser_manifest, event_manifest, event) VALUES (?, ?, ?, ?, '0', 'pekko', 4, '', '', ?)`
		for seq := int64(1); seq <= 22; seq++ {
			pnr := int64(0)
			switch {
			case seq >= 9 && seq <= 20:
				pnr = 1
			case seq > 20:
				pnr = 2
			}
			if err := s.Session().Query(insert, pid, pnr, seq, gocql.TimeUUID(), fmt.Appendf(nil, "%d", seq)).Exec(); err != nil {
				t.Fatal(err)
			}
		}
		for _, from := range []int64{1, 5, 9, 10, 21} {
			if got := replaySeqs(t, j, pid, from); !consecutive(got, from, 22) {
				t.Errorf("replay from %d = %v", from, got)
			}
		}
		if n, err := j.HighestSequenceNr(ctx, pid, 0); err != nil || n != 22 {
			t.Errorf("HighestSequenceNr = %d, %v; want 22", n, err)
		}
		// Annals continues the id Pekko started.
		if res := write(events(pid, 23, 25)); res != nil {
			t.Fatalf("continue: %v", res)
		}
		if got := replaySeqs(t, j, pid, 1); !consecutive(got, 1, 25) {
			t.Errorf("replay after continuing = %v", got)
		}
		if err := j.DeleteTo(ctx, pid, 10); err != nil {
			t.Fatal(err)
		}
		if got := replaySeqs(t, j, pid, 1); !consecutive(got, 11, 25) {
			t.Errorf("replay after DeleteTo(10) = %v, want 11–25", got)
		}
	})
}

// TestBadInput: bad URLs and options fail Open with ErrInvalidConfig, an
// unreachable node with ErrUnreachable, a keyspace without tables with
// ErrSchemaMissing; writes the store or the server cannot take are
// rejected alone, and what was stored stays.
func TestBadInput(t *testing.T) {
	addr := cassandratest.Server(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		url  string
		want error
	}{
		{"postgres://" + addr + "/ks", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/1bad", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/bad-name", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/" + strings.Repeat("k", 49), cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/ks?consistency=most", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/ks?partition_size=0", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/ks?colour=blue", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/ks?bucket_size=Week", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/ks?first_time_bucket=2015-11-20", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/ks?eventual_consistency_delay=-1s", cassandra.ErrInvalidConfig},
		{"cassandra://" + addr + "/ks?gap_timeout=soon", cassandra.ErrInvalidConfig},
		{"cassandra://127.0.0.1:9042,127.0.0.2:9043/ks", cassandra.ErrInvalidConfig}, // the nodes of a cluster share one port
		{"cassandra://127.0.0.1:0/ks", cassandra.ErrInvalidConfig},
		{"cassandra://127.0.0.1:1/ks?timeout=2s", cassandra.ErrUnreachable},
		{"cassandra://" + addr + "/annals_no_such_keyspace", cassandra.ErrSchemaMissing},
	} {
		s, err := cassandra.Open(ctx, c.url)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, c.want) {
			t.Errorf("Open(%s) = %v, want %v", c.url, err, c.want)
		}
	}

	s := cassandratest.Open(t, cassandra.WithMaxPayloadSize(64<<10), cassandra.WithPartitionSize(1000))
	j := s.Journal()
	pid := "Bad|writes"
	if res, err := j.Write(ctx, []journal.AtomicWrite{events(pid, 1, 3)}); res != nil || err != nil {
		t.Fatal(res, err)
	}
	big := events(pid, 4, 4)
	big.Events[0].Payload = make([]byte, 65<<10)
	huge := events("Bad|huge", 1, 1001) // more events than a partition holds
	res, err := j.Write(ctx, []journal.AtomicWrite{big, huge, events("Bad|other", 1, 1)})
	if err != nil {
		t.Fatalf("outcome unknown: %v", err)
	}
	if len(res) != 3 || !errors.Is(res[0], journal.ErrRejected) || !errors.Is(res[1], journal.ErrRejected) || res[2] != nil {
		t.Fatalf("results = %v, want two rejections and a stored write", res)
	}
	if got := replaySeqs(t, j, pid, 1); !consecutive(got, 1, 3) {
		t.Errorf("after the rejections the journal holds %v, want 1–3", got)
	}
}

// TestFirstWriteGuard: an id's first write (from event 1) asks at once
// for a partition without a guard, and still meets every other writer: a
// write of 1 to an id Annals wrote is a conflict that changes nothing, and
// of writers racing for event 1 of a new id (separate stores, as separate
// processes) exactly one wins.
func TestFirstWriteGuard(t *testing.T) {
	u, _ := cassandratest.URL(t)
	open := func() *cassandra.Store {
		t.Helper()
		s, err := cassandra.Open(t.Context(), u, cassandra.WithMigrate(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	stores := []*cassandra.Store{open(), open(), open()}
	tests := []struct {
		name    string
		written int64 // events 1..written stored first
		racers  int
		wantOK  int
	}{
		{name: "new id", racers: 1, wantOK: 1},
		{name: "id with 3 events", written: 3, racers: 1, wantOK: 0},
		{name: "three writers racing for a new id", racers: 3, wantOK: 1},
		{name: "three writers racing for an id with 1 event", written: 1, racers: 3, wantOK: 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := fmt.Sprintf("First|%d", i)
			if tt.written > 0 {
				mustWriteAll(t, stores[0].Journal(), events(pid, 1, tt.written))
			}
			results := make(chan error, tt.racers)
			for r := range tt.racers {
				go func() {
					w := events(pid, 1, 2)
					for i := range w.Events {
						w.Events[i].WriterID = fmt.Sprintf("racer-%d", r)
					}
					res, err := stores[r].Journal().Write(t.Context(), []journal.AtomicWrite{w})
					if err == nil && len(res) > 0 { // nil results: every write stored
						err = res[0]
					}
					results <- err
				}()
			}
			ok := 0
			for range tt.racers {
				switch err := <-results; {
				case err == nil:
					ok++
				case !errors.Is(err, journal.ErrSequenceConflict):
					t.Errorf("a racer's write failed with %v, want nil or ErrSequenceConflict", err)
				}
			}
			if ok != tt.wantOK {
				t.Errorf("%d writes of event 1 stored, want %d", ok, tt.wantOK)
			}
			want := int64(2) // the winner's events
			if tt.wantOK == 0 {
				want = tt.written
			}
			if got := replaySeqs(t, stores[0].Journal(), pid, 1); !consecutive(got, 1, want) {
				t.Errorf("replayed %v, want 1..%d", got, want)
			}
		})
	}
}
