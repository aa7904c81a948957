package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/snapshot"
	_ "github.com/mattn/go-sqlite3"
)

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// foreignDB makes an SQLite database with a table of someone else's.
func foreignDB(t *testing.T, path string) {
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers VALUES (1, 'ada')`); err != nil {
		t.Fatal(err)
	}
}

// newerDB makes an Annals database and sets its schema version above ours.
func newerDB(t *testing.T, path string) {
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.writer.Exec(`UPDATE annals_schema SET version = ?`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesForeignFilesAndChangesNothing(t *testing.T) {
	tests := []struct {
		name    string
		make    func(t *testing.T, path string)
		want    error
		message string
	}{
		{"text file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("not a database\n"), 500), 0o644); err != nil {
				t.Fatal(err)
			}
		}, ErrNotAnnals, "not an SQLite database"},
		{"other application's SQLite database", foreignDB, ErrNotAnnals, "no annals_schema"},
		{"newer schema version", newerDB, ErrNewerSchema, fmt.Sprintf("schema version %d", SchemaVersion+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "file.db")
			tt.make(t, path)
			before := fileHash(t, path)
			entries, _ := os.ReadDir(filepath.Dir(path))
			_, err := Open(t.Context(), path)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.message) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open = %v, want %v naming the file and saying %q", err, tt.want, tt.message)
			}
			if fileHash(t, path) != before {
				t.Error("Open changed the file it refused")
			}
			after, _ := os.ReadDir(filepath.Dir(path))
			if len(after) != len(entries) {
				t.Errorf("Open left new files beside the one it refused: %d entries, had %d", len(after), len(entries))
			}
		})
	}
}

func TestOpenRejectsNonFileDSN(t *testing.T) {
	for _, dsn := range []string{"", ":memory:", "sqlite::memory:", "file:x.db?mode=memory"} {
		if _, err := Open(t.Context(), dsn); err == nil || !strings.Contains(err.Error(), "not a file path") {
			t.Errorf("Open(%q) = %v, want an error saying it is not a file path", dsn, err)
		}
	}
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "annals.db")
	s, err := Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	w := journal.AtomicWrite{PersistenceID: "Acc|1", Events: []journal.Repr{{PersistenceID: "Acc|1", SequenceNr: 1, Payload: []byte("a"), Tags: []string{"t", "t", "u"}}}}
	if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatalf("Write: %v %v", res, err)
	}
	if err := s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Acc|1", SequenceNr: 1}, Payload: []byte("s")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Journal().HighestSequenceNr(ctx, "Acc|1", 0); !errors.Is(err, journal.ErrClosed) {
		t.Errorf("call after Close: %v, want journal.ErrClosed", err)
	}
	if _, _, err := s.Snapshots().Load(ctx, "Acc|1", snapshot.Latest()); !errors.Is(err, snapshot.ErrClosed) {
		t.Errorf("snapshot call after Close: %v, want snapshot.ErrClosed", err)
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if n, err := s.Journal().HighestSequenceNr(ctx, "Acc|1", 0); err != nil || n != 1 {
		t.Errorf("after reopen highest = %d, %v, want 1", n, err)
	}
	if _, ok, err := s.Snapshots().Load(ctx, "Acc|1", snapshot.Latest()); err != nil || !ok {
		t.Errorf("after reopen snapshot load = %v, %v", ok, err)
	}
	var tags int
	if err := s.reader.QueryRow(`SELECT count(*) FROM event_tag`).Scan(&tags); err != nil || tags != 2 {
		t.Errorf("tag index holds %d rows (%v), want 2: one per distinct tag", tags, err)
	}
}

func TestPragmas(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		sync int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{
		{"default is FULL", nil, 2},
		{"NORMAL on request", []Option{WithSynchronous(SyncNormal)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(t.Context(), filepath.Join(t.TempDir(), "a.db"), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var mode string
			var sync int
			if err := s.writer.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
				t.Errorf("journal_mode = %q (%v), want wal", mode, err)
			}
			if err := s.writer.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != tt.sync {
				t.Errorf("synchronous = %d (%v), want %d", sync, err, tt.sync)
			}
			if _, err := s.reader.Exec(`DELETE FROM event_journal`); err == nil {
				t.Error("reader connections must be query-only")
			}
		})
	}
}

func TestOversizePayloadRejected(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "a.db"), WithMaxPayloadSize(100))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := func(seq int64, n int) journal.AtomicWrite {
		return journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{{PersistenceID: "p", SequenceNr: seq, Payload: make([]byte, n)}}}
	}
	res, err := s.Journal().Write(ctx, []journal.AtomicWrite{ev(1, 100), ev(2, 101)})
	if err != nil || len(res) != 2 || res[0] != nil || !errors.Is(res[1], journal.ErrRejected) || !strings.Contains(res[1].Error(), "101-byte payload") {
		t.Fatalf("results %v, %v: want the 101-byte event rejected, naming its size", res, err)
	}
	if err := s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "p", SequenceNr: 1}, Payload: make([]byte, 101)}); !errors.Is(err, snapshot.ErrInvalidArgument) {
		t.Errorf("oversize snapshot: %v, want ErrInvalidArgument", err)
	}
}

// TestMigratesOlderSchema turns a database back into schema version 1 and
// checks that Open migrates it, keeping its events; the tables of later
// versions work.
func TestMigratesOlderSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	w := journal.AtomicWrite{PersistenceID: "A|1", Events: []journal.Repr{{PersistenceID: "A|1", SequenceNr: 1, Payload: []byte("x")}}}
	if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	if _, err := s.writer.Exec(`DROP INDEX event_journal_type_ordering_idx; DROP TABLE projection_offset; DROP TABLE projection_management; DROP TABLE durable_state; DROP TABLE durable_state_clock; DROP TABLE cluster_members; DROP TABLE cluster_leases; UPDATE annals_schema SET version = 1`); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("open version 1: %v", err)
	}
	defer s.Close()
	var version, index int
	if err := s.reader.QueryRow(`SELECT version FROM annals_schema`).Scan(&version); err != nil || version != SchemaVersion {
		t.Errorf("schema version after migration = %d (%v), want %d", version, err, SchemaVersion)
	}
	if err := s.reader.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'event_journal_type_ordering_idx'`).Scan(&index); err != nil || index != 1 {
		t.Errorf("migration 1 → 2 did not create its index (%d, %v)", index, err)
	}
	if n, err := s.Journal().HighestSequenceNr(ctx, "A|1", 0); err != nil || n != 1 {
		t.Errorf("events after migration: highest %d, %v; want 1", n, err)
	}
	if _, err := s.Membership().Acquire(ctx, "c", "r0", membership.Holder{Name: "a", Incarnation: "1"}, time.Minute); err != nil {
		t.Errorf("migration 5 → 6: Acquire: %v", err)
	}
}

func TestOutOfRangeTimestampsRejected(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "ts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	w := journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{{PersistenceID: "p", SequenceNr: 1, Payload: []byte("x"), Timestamp: far}}}
	res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w})
	if err != nil || len(res) != 1 || !errors.Is(res[0], journal.ErrRejected) || !strings.Contains(res[0].Error(), "1678–2262") {
		t.Errorf("event in the year 3000: %v, %v; want a rejection naming the range", res, err)
	}
	err = s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "p", SequenceNr: 1, Timestamp: far}, Payload: []byte("s")})
	if !errors.Is(err, snapshot.ErrInvalidArgument) {
		t.Errorf("snapshot in the year 3000: %v, want ErrInvalidArgument", err)
	}
}

func TestReplayHoldsNoReaderAndHonoursContext(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "r.db"), WithReaders(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{{PersistenceID: "p", SequenceNr: 1, Payload: []byte("x")}, {PersistenceID: "p", SequenceNr: 2, Payload: []byte("y")}}}
	if _, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil {
		t.Fatal(err)
	}
	// A replay paused by its consumer holds no reader: another one runs.
	next, stop := iter.Pull2(s.Journal().Replay(ctx, "p", 1, 10, 10))
	defer stop()
	if _, err, ok := next(); !ok || err != nil {
		t.Fatalf("first replay: %v", err)
	}
	n := 0
	for _, err := range s.Journal().Replay(ctx, "p", 1, 10, 10) {
		if err != nil {
			t.Fatalf("replay beside a paused one: %v", err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("replay beside a paused one yielded %d events, want 2", n)
	}
	// With the only reader taken, a replay waits, until its context ends.
	conn, err := s.reader.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	var got error
	for _, err := range s.Journal().Replay(short, "p", 1, 10, 10) {
		got = err
	}
	if !errors.Is(got, context.DeadlineExceeded) {
		t.Fatalf("second replay while the reader is busy ended with %v, want DeadlineExceeded", got)
	}
}

func TestBusyTimeoutBoundsTheWaitForAnotherWriter(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "busy.db")
	a, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, path, WithBusyTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	held, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = a.Projections().InTx(ctx, func(tx *sql.Tx) error { // another process's write lock
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	w := journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{{PersistenceID: "p", SequenceNr: 1, Payload: []byte("x")}}}
	_, err = b.Journal().Write(ctx, []journal.AtomicWrite{w})
	close(release)
	if err == nil || errors.Is(err, journal.ErrRejected) {
		t.Errorf("write while another store holds the lock: %v, want a failure (outcome unknown), not a rejection", err)
	}
}

// TestNegativeSettingsRefused: zero keeps a setting's default; a negative
// one fails Open with ErrInvalidConfig naming it, and creates no file.
func TestNegativeSettingsRefused(t *testing.T) {
	for _, c := range []struct {
		opt  Option
		name string
	}{
		{WithReaders(-1), "WithReaders -1"},
		{WithMaxPayloadSize(-5), "WithMaxPayloadSize -5"},
		{WithPollInterval(-time.Second), "WithPollInterval -1s"},
		{WithBusyTimeout(-time.Millisecond), "WithBusyTimeout -1ms"},
	} {
		path := filepath.Join(t.TempDir(), "x.db")
		s, err := Open(t.Context(), path, c.opt)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("Open with %s: %v, want ErrInvalidConfig naming it", c.name, err)
		}
		if _, statErr := os.Stat(path); statErr == nil {
			t.Errorf("Open with %s created the file", c.name)
		}
	}
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "zero.db"), WithReaders(0), WithMaxPayloadSize(0), WithPollInterval(0), WithBusyTimeout(0))
	if err != nil {
		t.Fatalf("Open with zero settings (the defaults): %v", err)
	}
	s.Close()
}
