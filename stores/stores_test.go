package stores_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/stores"
)

// cassandraURL is a keyspace of the test's own on the test node (skipped
// when the node does not answer), with a query delay and first bucket
// that let a test's events by tag come back at once.
func cassandraURL(t *testing.T) string {
	u, _ := cassandratest.URL(t)
	first := time.Now().UTC().Add(-time.Hour).Format("20060102T15:04")
	return u + "?eventual_consistency_delay=10ms&first_time_bucket=" + first
}

// kafkaURL is the test broker with topics of the test's own (skipped when
// the broker does not answer), before its eventual= parameter.
func kafkaURL(t *testing.T) string {
	brokers := kafkatest.Real(t)
	return "kafka://" + brokers[0] + "/?topic_prefix=" + kafkatest.Prefix(t, brokers, "stack")
}

func sqliteURL(t *testing.T, name string) string {
	return "sqlite:" + filepath.Join(t.TempDir(), name)
}

func pgURL(t *testing.T) string {
	dsn, _ := pgtest.Schema(t)
	return dsn
}

// TestOpen opens each kind of stack from its URL, writes and reads
// tagged events through it, and, where the store answers events by tag,
// projects them exactly once into a table of its read model.
func TestOpen(t *testing.T) {
	for _, c := range []struct {
		name          string
		url           func(t *testing.T) string
		kind, rmKind  string
		byTag, hasDur bool
	}{
		{"sqlite", func(t *testing.T) string { return sqliteURL(t, "app.db") }, "sqlite", "sqlite", true, true},
		{"memory", func(*testing.T) string { return "memory:" }, "memory", "memory", true, true},
		{"postgres", pgURL, "postgres", "postgres", true, true},
		{"cassandra, read model on sqlite", func(t *testing.T) string {
			return cassandraURL(t) + "&readmodel=" + sqliteURL(t, "readmodel.db")
		}, "cassandra", "sqlite", true, true},
		{"cassandra, read model on postgres", func(t *testing.T) string {
			return cassandraURL(t) + "&readmodel=" + pgURL(t)
		}, "cassandra", "postgres", true, true},
		{"cassandra without read model", cassandraURL, "cassandra", "", false, true},
		{"kafka on postgres, read model on sqlite", func(t *testing.T) string {
			return kafkaURL(t) + "&eventual=" + pgURL(t) + "&readmodel=" + sqliteURL(t, "readmodel.db")
		}, "kafka", "sqlite", false, false},
		{"kafka on cassandra, read model on postgres first", func(t *testing.T) string {
			k := kafkaURL(t)
			return k + "&readmodel=" + pgURL(t) + "&eventual=" + cassandraURL(t)
		}, "kafka", "postgres", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			url := c.url(t)
			st, err := stores.Open(ctx, url, stores.WithMigrate(true))
			if err != nil {
				t.Fatalf("Open(%s): %v", stores.Redact(url), err)
			}
			defer func() {
				if err := st.Close(); err != nil {
					t.Error(err)
				}
			}()
			if st.Kind != c.kind || st.ReadModelKind != c.rmKind || (st.Durable != nil) != c.hasDur || (st.Membership != nil) != c.hasDur {
				t.Errorf("stack %s (read model %q, durable %v, membership %v), want %s (read model %q, both %v)",
					st.Kind, st.ReadModelKind, st.Durable != nil, st.Membership != nil, c.kind, c.rmKind, c.hasDur)
			}
			if (st.ReadModelMembership != nil) != (c.rmKind != "") {
				t.Errorf("read model's membership %v, want one exactly when the stack has a read model (%q)", st.ReadModelMembership, c.rmKind)
			}
			switch c.rmKind {
			case "sqlite":
				if _, ok := st.ReadModelMembership.(membership.TxChecker[*sql.Tx]); !ok {
					t.Errorf("read model's membership %T checks no lease in a *sql.Tx", st.ReadModelMembership)
				}
			case "postgres":
				if _, ok := st.ReadModelMembership.(membership.TxChecker[pgx.Tx]); !ok {
					t.Errorf("read model's membership %T checks no lease in a pgx.Tx", st.ReadModelMembership)
				}
			}
			pid := "Thing|" + unique()
			writeAndRead(ctx, t, st, pid)
			switch st.ReadModelKind {
			case "":
				if _, err := stores.ReadModelOf[*sql.Tx](st); !errors.Is(err, stores.ErrNoReadModel) || !strings.Contains(err.Error(), "readmodel=") {
					t.Errorf("ReadModelOf without a read model: %v, want ErrNoReadModel naming readmodel=", err)
				}
				return
			case "sqlite":
				if _, err := stores.ReadModelOf[pgx.Tx](st); !errors.Is(err, stores.ErrNoReadModel) || !strings.Contains(err.Error(), "*sql.Tx") {
					t.Errorf("ReadModelOf[pgx.Tx] on SQLite: %v, want ErrNoReadModel naming *sql.Tx", err)
				}
			}
			tags, ok := st.Queries.(query.EventsByTagQuery)
			if ok != c.byTag {
				t.Fatalf("events by tag: %v, want %v", ok, c.byTag)
			}
			src := projection.Source{}
			if ok {
				src = projection.ByTag(tags, "stack")
			} else { // the Kafka journal: its topic read by slices
				bySlices, ok := st.Queries.(query.EventsBySlicesQuery)
				if !ok {
					t.Fatalf("%s offers neither events by tag nor by slices", st.Kind)
				}
				src = projection.BySlices(bySlices, annals.EntityType(pid), annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1})
			}
			switch st.ReadModelKind {
			case "sqlite":
				projectSQL(ctx, t, st, src, pid, func(ctx context.Context, tx *sql.Tx, stmt string, args ...any) error {
					_, err := tx.ExecContext(ctx, stmt, args...)
					return err
				}, func(ctx context.Context, tx *sql.Tx, stmt string, args ...any) row {
					return tx.QueryRowContext(ctx, stmt, args...)
				})
			case "postgres":
				projectSQL(ctx, t, st, src, pid, func(ctx context.Context, tx pgx.Tx, stmt string, args ...any) error {
					_, err := tx.Exec(ctx, stmt, args...)
					return err
				}, func(ctx context.Context, tx pgx.Tx, stmt string, args ...any) row {
					return tx.QueryRow(ctx, stmt, args...)
				})
			case "memory":
				projectMemory(ctx, t, st, src, pid)
			}
		})
	}
}

// inTx runs an empty transaction of the stack's read model.
func inTx[Tx any](ctx context.Context, st *stores.Stack) error {
	rm, err := stores.ReadModelOf[Tx](st)
	if err != nil {
		return err
	}
	return rm.InTx(ctx, func(Tx) error { return nil })
}

// events is how many events a test writes.
const events = 3

func unique() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeAndRead writes events tagged "stack" for pid through the stack's
// journal and reads them back through its read journal.
func writeAndRead(ctx context.Context, t *testing.T, st *stores.Stack, pid string) {
	t.Helper()
	var w journal.AtomicWrite
	w.PersistenceID = pid
	for n := int64(1); n <= events; n++ {
		w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: n, Payload: []byte{byte(n)}, SerializerID: 4, Tags: []string{"stack"}})
	}
	if res, err := st.Journal.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatalf("write: %v %v", res, err)
	}
	var got int64
	for env, err := range st.Queries.CurrentEventsByPersistenceID(ctx, pid, 1, 100) {
		if err != nil {
			t.Fatal(err)
		}
		if got++; env.SequenceNr != got || env.Payload[0] != byte(got) {
			t.Fatalf("event %d read back as %d %v", got, env.SequenceNr, env.Payload)
		}
	}
	if got != events {
		t.Fatalf("read %d events back, want %d", got, events)
	}
}

// row is a row a query returned (*sql.Row, pgx.Row).
type row interface{ Scan(dest ...any) error }

// projectSQL projects the pid's tagged events exactly once into a table of
// the stack's read model whose transactions are Tx, and waits for them.
// The code is the same for every store; Tx, exec and queryRow are the
// read model database's.
func projectSQL[Tx any](ctx context.Context, t *testing.T, st *stores.Stack, src projection.Source, pid string,
	exec func(ctx context.Context, tx Tx, stmt string, args ...any) error, queryRow func(ctx context.Context, tx Tx, stmt string, args ...any) row) {
	t.Helper()
	rm, err := stores.ReadModelOf[Tx](st)
	if err != nil {
		t.Fatal(err)
	}
	if err := rm.InTx(ctx, func(tx Tx) error {
		return exec(ctx, tx, `CREATE TABLE IF NOT EXISTS stack_events (pid TEXT NOT NULL, seq_nr BIGINT NOT NULL, PRIMARY KEY (pid, seq_nr))`)
	}); err != nil {
		t.Fatal(err)
	}
	p, err := projection.ExactlyOnce(projection.ID{Name: "stack-" + unique(), Key: "all"}, src, rm,
		func(ctx context.Context, tx Tx, env query.Envelope) error {
			return exec(ctx, tx, `INSERT INTO stack_events (pid, seq_nr) VALUES ($1, $2)`, env.PersistenceID, env.SequenceNr)
		}, projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(ctx, t, p, func() (int, error) {
		var n int
		err := rm.InTx(ctx, func(tx Tx) error {
			return queryRow(ctx, tx, `SELECT count(*) FROM stack_events WHERE pid = $1`, pid).Scan(&n)
		})
		return n, err
	})
}

// projectMemory is projectSQL on the memory store's read model: a map
// changed when the transaction commits.
func projectMemory(ctx context.Context, t *testing.T, st *stores.Stack, src projection.Source, pid string) {
	t.Helper()
	rm, err := stores.ReadModelOf[*memory.Tx](st)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	p, err := projection.ExactlyOnce(projection.ID{Name: "stack-" + unique(), Key: "all"}, src, rm,
		func(_ context.Context, tx *memory.Tx, env query.Envelope) error {
			tx.OnCommit(func() { mu.Lock(); seen[env.PersistenceID]++; mu.Unlock() })
			return nil
		}, projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(ctx, t, p, func() (int, error) { mu.Lock(); defer mu.Unlock(); return seen[pid], nil })
}

// runUntil runs p until count reports every event, then stops it.
func runUntil(ctx context.Context, t *testing.T, p *projection.Projection, count func() (int, error)) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("projection: %v", err)
		}
	}()
	for {
		n, err := count()
		switch {
		case err != nil:
			t.Fatal(err)
		case n == events:
			return
		case n > events:
			t.Fatalf("read model holds %d events, want %d", n, events)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("read model holds %d of %d events when the test's time ran out", n, events)
		case err := <-done:
			t.Fatalf("projection stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestOpenBadURLs: a malformed URL is an error matching ErrBadURL that
// names the problem, without the URL's passwords, and creates nothing.
func TestOpenBadURLs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	for _, c := range []struct {
		name, url, want string
	}{
		{"unknown scheme", "mysql://u:s3cret@db/app", "unknown store URL"},
		{"keyword/value DSN", "host=db user=u password=s3cret", "unknown store URL"},
		{"memory with a path", "memory:" + file("m.db"), "want memory: alone"},
		{"sqlite without a path", "sqlite:", "not a file path"},
		{"read model on sqlite", "sqlite:" + file("a.db") + "?readmodel=sqlite:" + file("b.db"), "readmodel= is for cassandra:// and kafka://"},
		{"read model on postgres", "postgres://u:s3cret@127.0.0.1:1/app?schema=a&readmodel=sqlite:" + file("c.db"), "readmodel= is for cassandra:// and kafka://"},
		{"eventual on cassandra", "cassandra://u:s3cret@127.0.0.1:1/ks?eventual=postgres://u:s3cret@127.0.0.1:1/app", "for kafka:// URLs only"},
		{"read model on cassandra", "cassandra://127.0.0.1:1/ks?readmodel=cassandra://u:s3cret@127.0.0.1:1/rm", "keeps no projection offsets"},
		{"read model of an unknown scheme", "cassandra://127.0.0.1:1/ks?readmodel=mysql://u:s3cret@db/app", "unknown store URL"},
		{"read model without a path", "cassandra://127.0.0.1:1/ks?readmodel=sqlite:", "not a file path"},
		{"read model naming a store", "cassandra://127.0.0.1:1/ks?readmodel=sqlite:" + file("d.db") + "&eventual=postgres://u:s3cret@127.0.0.1:1/app", "for kafka:// URLs only"},
		{"cassandra parameter", "cassandra://u:s3cret@127.0.0.1:1/ks?consistency=most&readmodel=sqlite:" + file("e.db"), "consistency"},
		{"kafka without eventual", "kafka://127.0.0.1:1/?readmodel=sqlite:" + file("f.db"), "want brokers and an eventual store"},
		{"kafka without brokers", "kafka:///?eventual=postgres://u:s3cret@127.0.0.1:1/app", "want brokers and an eventual store"},
		{"kafka eventual on sqlite", "kafka://127.0.0.1:1/?eventual=sqlite:" + file("g.db"), "must be cassandra:// or postgres://"},
		{"kafka parameter", "kafka://127.0.0.1:1/?colour=red&eventual=postgres://u:s3cret@127.0.0.1:1/app", `unknown parameter "colour"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := stores.Open(t.Context(), c.url, stores.WithMigrate(true))
			if !errors.Is(err, stores.ErrBadURL) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Open: %v, want ErrBadURL saying %q", err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows a password: %v", err)
			}
		})
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("files created by bad URLs: %v %v", entries, err)
	}
}

// TestOpenBadReadModelOnServer: a read model URL the server's store
// refuses stops Open before the store opens; the password stays out.
func TestOpenBadReadModelOnServer(t *testing.T) {
	t.Parallel()
	ks := cassandraURL(t)
	bad := pgtest.WithParam(pgURL(t), "schema", "1-not-a-name")
	bad = strings.Replace(bad, "://postgres@", "://postgres:s3cret@", 1)
	_, err := stores.Open(t.Context(), ks+"&readmodel="+bad, stores.WithMigrate(true))
	if !errors.Is(err, stores.ErrBadURL) || !strings.Contains(err.Error(), "schema") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Open: %v, want ErrBadURL naming the schema, without the password", err)
	}
	// Nothing was created: the keyspace does not open without migrating.
	if _, err := stores.Open(t.Context(), ks); err == nil || errors.Is(err, stores.ErrBadURL) {
		t.Errorf("the keyspace opens (or its URL is refused) after a refused read model: %v", err)
	}
}

// TestOpenExisting: without WithMigrate, Open creates nothing and names
// the command that creates the store.
func TestOpenExisting(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t, "missing.db")
	if _, err := stores.Open(t.Context(), url); err == nil || !strings.Contains(err.Error(), "annals init --store "+url) {
		t.Fatalf("Open of a missing file: %v, want the command that creates it", err)
	}
	if _, err := os.Stat(strings.TrimPrefix(url, "sqlite:")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file exists after Open without WithMigrate: %v", err)
	}
}

// TestURLs: Redact hides every password of a stack URL, and ReadModelURL
// cuts the read model's URL out.
func TestURLs(t *testing.T) {
	for _, c := range []struct{ in, redacted, store, readModel string }{
		{"sqlite:./annals.db", "sqlite:./annals.db", "sqlite:./annals.db", ""},
		{"postgres://annals:s3cret@db/app?schema=x", "postgres://annals:xxxxx@db/app?schema=x", "postgres://annals:s3cret@db/app?schema=x", ""},
		{"postgres://annals@db/app?password=s3cret&schema=x", "postgres://annals@db/app?password=xxxxx&schema=x", "postgres://annals@db/app?password=s3cret&schema=x", ""},
		{"host=db password=s3cret sslpassword=k3y", "host=db password=xxxxx sslpassword=xxxxx", "host=db password=s3cret sslpassword=k3y", ""},
		{"cassandra://u:s3cret@c:9042/ks?readmodel=postgres://u:pw@db/app?schema=rm",
			"cassandra://u:xxxxx@c:9042/ks?readmodel=postgres://u:xxxxx@db/app?schema=rm",
			"cassandra://u:s3cret@c:9042/ks", "postgres://u:pw@db/app?schema=rm"},
		{"kafka://k:9092/?topic_prefix=j-&eventual=postgres://u:s3cret@db/app?schema=ev&readmodel=sqlite:rm.db",
			"kafka://k:9092/?topic_prefix=j-&eventual=postgres://u:xxxxx@db/app?schema=ev&readmodel=sqlite:rm.db",
			"kafka://k:9092/?topic_prefix=j-&eventual=postgres://u:s3cret@db/app?schema=ev", "sqlite:rm.db"},
		{"kafka://svc:ab/cd+ef@k:9092/?sasl=plain&eventual=postgres://u@db/app",
			"kafka://svc:xxxxx@k:9092/?sasl=plain&eventual=postgres://u@db/app",
			"kafka://svc:ab/cd+ef@k:9092/?sasl=plain&eventual=postgres://u@db/app", ""},
		{"cassandra://admin:a#b@c:9042/ks", "cassandra://admin:xxxxx@c:9042/ks", "cassandra://admin:a#b@c:9042/ks", ""},
		{"kafka://k:9092/?readmodel=sqlite:rm.db&eventual=cassandra://u:s3cret@c/ks",
			"kafka://k:9092/?readmodel=sqlite:rm.db&eventual=cassandra://u:xxxxx@c/ks",
			"kafka://k:9092/?eventual=cassandra://u:s3cret@c/ks", "sqlite:rm.db"},
	} {
		if got := stores.Redact(c.in); got != c.redacted {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.redacted)
		}
		if s, rm := stores.ReadModelURL(c.in); s != c.store || rm != c.readModel {
			t.Errorf("ReadModelURL(%q) = %q, %q; want %q, %q", c.in, s, rm, c.store, c.readModel)
		}
	}
}
