package console

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"iter"
	"log"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// The known data every test store holds.
const (
	scriptPayload = `{"note":"<script>alert('x')</script>","amount":42}`
	manyID        = "Account|many"
	manyEvents    = 250
)

// testStore names a store the tests run on.
type testStore struct {
	name string
	url  func(t *testing.T) string
}

// testStores are memory, SQLite, and PostgreSQL in both layouts when its
// server answers (or fails the test when ANNALS_TEST_REQUIRE lists it).
func testStores(t *testing.T, withPostgres bool) []testStore {
	out := []testStore{
		{"memory", func(*testing.T) string { return "memory:" }},
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "console.db") }},
	}
	if withPostgres {
		out = append(out,
			testStore{"postgres", func(t *testing.T) string { dsn, _ := pgtest.Schema(t); return dsn }},
			testStore{"postgres-r2dbc", func(t *testing.T) string {
				dsn, _ := pgtest.Schema(t)
				return pgtest.WithParam(dsn, "layout", "r2dbc")
			}},
		)
	}
	return out
}

// openStore opens (creating) the store at url and fills it with the known
// data.
func openStore(t *testing.T, url string) *stores.Store {
	t.Helper()
	ctx := context.Background()
	s, err := stores.New().Open(ctx, url, stores.Create)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	fill(t, s)
	return s
}

func repr(pid string, seq int64, payload []byte, serializer int32, manifest string, tags ...string) journal.Repr {
	return journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: payload, SerializerID: serializer, Manifest: manifest, Timestamp: time.Now(), WriterID: "console-test", Tags: tags}
}

func write(t *testing.T, s *stores.Store, events ...journal.Repr) {
	t.Helper()
	byID := map[string][]journal.Repr{}
	var order []string
	for _, e := range events {
		if byID[e.PersistenceID] == nil {
			order = append(order, e.PersistenceID)
		}
		byID[e.PersistenceID] = append(byID[e.PersistenceID], e)
	}
	var ws []journal.AtomicWrite
	for _, id := range order {
		ws = append(ws, journal.AtomicWrite{PersistenceID: id, Events: byID[id]})
	}
	errs, err := s.Journal.Write(context.Background(), ws)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

// fill writes the known data: Account|a-1 with a JSON payload holding a
// script tag and a snapshot at 2; Account|a-2 with a binary payload;
// Account|a-3 with events 1-2 deleted; Account|many with 250 events;
// Order|o-1 tagged; a durable state; a projection's two instances; a
// cluster member holding a range and a daemon instance.
func fill(t *testing.T, s *stores.Store) {
	t.Helper()
	ctx := context.Background()
	bin, _ := hex.DecodeString("0a03666f6f1001")
	write(t, s,
		repr("Account|a-1", 1, []byte(`{"opened":true}`), serialization.JSONID, "Opened", "bank"),
		repr("Account|a-1", 2, []byte(scriptPayload), serialization.JSONID, "Deposited", "bank"),
		repr("Account|a-1", 3, []byte(`{"amount":7}`), serialization.JSONID, "Withdrawn", "bank"),
		repr("Account|a-2", 1, bin, serialization.ProtobufID, "bank.Opened"),
		repr("Account|a-3", 1, []byte(`{"n":1}`), serialization.JSONID, "N"),
		repr("Account|a-3", 2, []byte(`{"n":2}`), serialization.JSONID, "N"),
		repr("Account|a-3", 3, []byte(`{"n":3}`), serialization.JSONID, "N"),
		repr("Order|o-1", 1, []byte(`{"order":1}`), serialization.JSONID, "Placed", "orders"),
	)
	var many []journal.Repr
	for i := int64(1); i <= manyEvents; i++ {
		many = append(many, repr(manyID, i, fmt.Appendf(nil, `{"i":%d}`, i), serialization.JSONID, "I"))
	}
	write(t, s, many...)
	if err := s.Snapshots.Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|a-1", SequenceNr: 2, Timestamp: time.Now()}, Payload: []byte(`{"balance":42}`), SerializerID: serialization.JSONID, Manifest: "State"}); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := s.Journal.DeleteTo(ctx, "Account|a-3", 2); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if s.Durable != nil {
		if err := s.Durable.Upsert(ctx, durable.Object{PersistenceID: "Profile|p-1", Revision: 1, Payload: []byte(`{"name":"Ada"}`), SerializerID: serialization.JSONID, Manifest: "Profile", Tag: "profiles"}); err != nil {
			t.Fatalf("durable: %v", err)
		}
	}
	if s.Offsets != nil {
		// An offset after every event of the first instance's range: its
		// backlog counts what is written after.
		start, err := (&figures{s: &Server{st: s}}).startNow(ctx, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
			return s.Queries.(query.EventsBySlicesQuery).CurrentEventsBySlices(ctx, "Account", 0, 1023, after)
		})
		if err != nil {
			t.Fatalf("start offset: %v", err)
		}
		if err := s.Offsets.SaveOffset(ctx, offsets.ID{Name: "balances", Key: "0-511"}, start); err != nil {
			t.Fatalf("offset: %v", err)
		}
		if err := s.Offsets.SaveOffset(ctx, offsets.ID{Name: "balances", Key: "512-1023"}, start); err != nil {
			t.Fatalf("offset: %v", err)
		}
	}
	if s.Membership != nil {
		m := membership.Member{Name: "node-1", Incarnation: "i1", Address: "127.0.0.1:7001"}
		if err := s.Membership.Join(ctx, "default", m, time.Hour); err != nil {
			t.Fatalf("join: %v", err)
		}
		for _, lease := range []string{"slices/0-511", "daemon/balances/0"} {
			if _, err := s.Membership.Acquire(ctx, "default", lease, m.Holder(), time.Hour); err != nil {
				t.Fatalf("acquire %s: %v", lease, err)
			}
		}
	}
}

// testPayload formats payloads as the annals command does, for the
// tests: JSON as it is, others in hex.
func testPayload(id int32, _ string, p []byte) Payload {
	if id == serialization.JSONID {
		return Payload{Kind: "json", Text: string(p), Size: len(p)}
	}
	return Payload{Kind: fmt.Sprint(id), Text: "0x" + hex.EncodeToString(p), Size: len(p)}
}

// newServer starts a console over s.
func newServer(t *testing.T, s *stores.Store, url string, mod func(*Options)) (*Server, *httptest.Server) {
	t.Helper()
	opt := Options{Store: s, URL: url, FormatPayload: testPayload, SampleEvery: 200 * time.Millisecond, Samples: 30, Log: log.New(io.Discard, "", 0)}
	if mod != nil {
		mod(&opt)
	}
	srv, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		<-done
	})
	return srv, hs
}
