package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/internal/outagetest"
	"github.com/annals-go/annals/internal/servicescript"
	"github.com/annals-go/annals/internal/testcerts"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestSecuredServer: the store reaches a server that takes TLS only with
// SCRAM passwords (scripts/services up postgres-ha), the password from the
// URL, from PGPASSWORD or from a passfile; and every way of getting it
// wrong fails at once with an error naming the cause, never the password.
func TestSecuredServer(t *testing.T) {
	pair := pgtest.HA(t)
	primary, _, _ := pgtest.HASchema(t, pair)
	withoutPassword := pgtest.WithParam(strings.Replace(primary, ":"+pair.Password+"@", "@", 1), "migrate", "true")
	passfile := filepath.Join(t.TempDir(), "pgpass")
	if err := os.WriteFile(passfile, []byte("127.0.0.1:*:*:postgres:"+pair.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stranger := testcerts.New(t, t.TempDir(), "stranger")
	// annals_cert must show a client certificate of its name from the
	// pair's CA, besides its password.
	ca := testcerts.Load(t, filepath.Join(pair.Certs, "ca.pem"), filepath.Join(pair.Certs, "ca.key"))
	now := time.Now()
	certDir := t.TempDir()
	withCert := func(dsn, certFile, keyFile string) string {
		return pgtest.WithParam(pgtest.WithParam(dsn, "sslcert", certFile), "sslkey", keyFile)
	}
	asCertRole := strings.Replace(primary, "://postgres:", "://annals_cert:", 1)
	validCert, validKey := ca.Client(t, certDir, "annals_cert", now.Add(-time.Hour), now.Add(time.Hour))
	expiredCert, expiredKey := ca.Client(t, t.TempDir(), "annals_cert", now.Add(-2*time.Hour), now.Add(-time.Hour))
	strangerCert, strangerKey := stranger.Client(t, t.TempDir(), "annals_cert", now.Add(-time.Hour), now.Add(time.Hour))

	t.Run("connects", func(t *testing.T) {
		for _, c := range []struct {
			name, dsn string
			env       bool // the password in PGPASSWORD
		}{
			{"password in the URL", pgtest.WithParam(primary, "migrate", "true"), false},
			{"password from PGPASSWORD", withoutPassword, true},
			{"password from a passfile", pgtest.WithParam(withoutPassword, "passfile", passfile), false},
			{"a client certificate too", withCert(pgtest.WithParam(asCertRole, "migrate", "true"), validCert, validKey), false},
		} {
			t.Run(c.name, func(t *testing.T) {
				if c.env {
					t.Setenv("PGPASSWORD", pair.Password)
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				s, err := postgres.Open(ctx, c.dsn)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer s.Close()
				pid := "Secured|" + strings.ReplaceAll(c.name, " ", "-")
				if _, err := s.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte(`{}`), SerializerID: 1}}}}); err != nil {
					t.Fatal(err)
				}
				var ssl bool
				if err := s.Pool().QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil || !ssl {
					t.Errorf("the connection's TLS: %v (error %v), want on", ssl, err)
				}
				if hi, err := s.Journal().HighestSequenceNr(ctx, pid, 0); err != nil || hi != 1 {
					t.Errorf("highest after one write: %d, %v", hi, err)
				}
			})
		}
	})

	t.Run("refuses", func(t *testing.T) {
		for _, c := range []struct {
			name, dsn string
			want      string // in the error
		}{
			{"wrong password", strings.Replace(primary, ":"+pair.Password+"@", ":not-the-password@", 1), "password authentication failed"},
			{"no password", pgtest.WithParam(withoutPassword, "passfile", filepath.Join(t.TempDir(), "none")), "password"},
			{"unknown CA", pgtest.WithParam(primary, "sslrootcert", stranger.File), "TLS with 127.0.0.1"},
			{"unknown CA, named", pgtest.WithParam(primary, "sslrootcert", stranger.File), "certificate signed by unknown authority"},
			{"plaintext", pgtest.WithParam(primary, "sslmode", "disable"), "no encryption"},
			{"missing client certificate", asCertRole, "connection requires a valid client certificate"},
			{"expired client certificate", withCert(asCertRole, expiredCert, expiredKey), "TLS with 127.0.0.1"},
			// The server's alert ("tls: expired certificate") may be lost
			// to a reset of the connection; the store names the expiry
			// from the certificate itself either way.
			{"expired client certificate, named", withCert(asCertRole, expiredCert, expiredKey), "expired on"},
			{"client certificate of another CA", withCert(asCertRole, strangerCert, strangerKey), "connection requires a valid client certificate"},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Setenv("PGPASSWORD", "") // none from the environment
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				s, err := postgres.Open(ctx, c.dsn)
				if err == nil {
					s.Close()
					t.Fatal("Open succeeded")
				}
				if ctx.Err() != nil {
					t.Fatalf("Open waited out its context: %v", err)
				}
				t.Logf("%s: %v", c.name, err)
				if !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %q, want it to name the cause (%q)", err, c.want)
				}
				if strings.Contains(err.Error(), pair.Password) {
					t.Errorf("error %q shows the password", err)
				}
			})
		}
	})
}

// TestStandbyServesQueriesAndProjections: a store opened on the hot
// standby answers the live query by slices and feeds an exactly-once
// projection whose offsets and read model are on the primary, while the
// standby lags (its replay paused and resumed): each sees every event once,
// each id's in order, on both orderings.
func TestStandbyServesQueriesAndProjections(t *testing.T) {
	pair := pgtest.HA(t)
	for _, ordering := range []postgres.Ordering{postgres.CommitOrder, postgres.TimestampOrder} {
		t.Run(ordering.String(), func(t *testing.T) {
			standbyReads(t, pair, ordering)
		})
	}
}

func standbyReads(t *testing.T, pair pgtest.HAPair, ordering postgres.Ordering) {
	const ids, perID = 6, 60
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	primaryDSN, standbyDSN, _ := pgtest.HASchema(t, pair)
	primary, err := postgres.Open(ctx, primaryDSN, postgres.WithMigrate(true), postgres.WithOrdering(ordering))
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	if err := primary.Projections().InTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE standby_seen (pid TEXT, seq BIGINT, PRIMARY KEY (pid, seq))`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The schema reaches the standby once replayed: a synchronous commit
	// waits for the standby's flush, not its replay.
	var standby *postgres.Store
	for deadline := time.Now().Add(30 * time.Second); ; {
		standby, err = postgres.Open(ctx, standbyDSN, postgres.WithOrdering(ordering), postgres.WithPollInterval(200*time.Millisecond),
			postgres.WithBacktracking(time.Minute, 2*time.Second))
		if err == nil {
			break
		}
		if !errors.Is(err, postgres.ErrSchemaMissing) || time.Now().After(deadline) {
			t.Fatalf("open the standby: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the standby replays the new schema
	}
	defer standby.Close()
	// The standby reads only: a write through it fails, naming why.
	ro := journal.Repr{PersistenceID: "Standby|ro", SequenceNr: 1, Payload: []byte(`{}`), SerializerID: 1}
	if errs, err := standby.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: ro.PersistenceID, Events: []journal.Repr{ro}}}); err == nil && (errs == nil || errs[0] == nil) {
		t.Error("a write through the standby succeeded")
	} else if msg := fmt.Sprint(err, errs); !strings.Contains(msg, "read-only transaction") {
		t.Errorf("a write through the standby: %s, want it to say the server is read-only", msg)
	}
	replay := func(fn string) {
		t.Helper()
		if _, err := standby.Pool().Exec(ctx, `SELECT `+fn+`()`); err != nil {
			t.Fatalf("%s on the standby: %v", fn, err)
		}
	}
	defer func() { _, _ = standby.Pool().Exec(context.Background(), `SELECT pg_wal_replay_resume()`) }()

	// The live query on the standby.
	var mu sync.Mutex
	live := map[string][]int64{}
	liveAll := make(chan struct{})
	total := 0
	stream := standby.Queries().EventsBySlices(ctx, "Standby", 0, 1023, query.NoOffset())
	var reading sync.WaitGroup
	reading.Go(func() {
		for env := range stream.All() {
			mu.Lock()
			live[env.PersistenceID] = append(live[env.PersistenceID], env.SequenceNr)
			total++
			if total == ids*perID {
				close(liveAll)
			}
			mu.Unlock()
		}
	})

	// The projection: source on the standby, offsets and rows on the
	// primary, in one transaction; a row seen twice breaks its key.
	p, err := projection.ExactlyOnce(projection.ID{Name: "standby-" + ordering.String(), Key: "all"},
		projection.BySlices(standby.Queries(), "Standby", annals.SliceRange{Min: 0, Max: 1023}), primary.Projections(),
		func(ctx context.Context, tx pgx.Tx, env query.Envelope) error {
			_, err := tx.Exec(ctx, `INSERT INTO standby_seen (pid, seq) VALUES ($1, $2)`, env.PersistenceID, env.SequenceNr)
			return err
		}, projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()

	write := func(round int) {
		t.Helper()
		for i := range ids {
			pid := fmt.Sprintf("Standby|%d", i)
			var evs []journal.Repr
			for k := range perID / 3 {
				seq := int64(round*perID/3 + k + 1)
				evs = append(evs, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte(`{}`), SerializerID: 1})
			}
			if errs, err := primary.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: evs}}); err != nil || (errs != nil && errs[0] != nil) {
				t.Fatalf("write round %d of %s: %v %v", round, pid, err, errs)
			}
		}
	}
	write(0)
	replay("pg_wal_replay_pause") // the standby lags from here
	write(1)
	time.Sleep(time.Second) // the lag the readers meet: writes on the primary they cannot see yet
	replay("pg_wal_replay_resume")
	write(2)

	select {
	case <-liveAll:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("the live query on the standby saw %d of %d events", total, ids*perID)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		behind, err := p.Behind(ctx, ids*perID)
		if err == nil && behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the projection from the standby is %d events behind (%v)", behind, err)
		}
		time.Sleep(200 * time.Millisecond) // the projection runs on
	}
	stopRun()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("projection: %v", err)
	}
	var rows int
	err = primary.Projections().InTx(ctx, func(tx pgx.Tx) error { return tx.QueryRow(ctx, `SELECT count(*) FROM standby_seen`).Scan(&rows) })
	if err != nil || rows != ids*perID {
		t.Errorf("the read model holds %d rows (%v), want every event once: %d", rows, err, ids*perID)
	}

	mu.Lock()
	defer mu.Unlock()
	want := make([]int64, perID)
	for i := range want {
		want[i] = int64(i + 1)
	}
	for _, pid := range slices.Sorted(maps.Keys(live)) {
		if !slices.Equal(live[pid], want) {
			t.Errorf("the live query gave %s %v, want 1..%d once each, in order", pid, live[pid], perID)
		}
	}
	if len(live) != ids {
		t.Errorf("the live query saw %d ids, want %d", len(live), ids)
	}
}

// TestFailoverToPromotedStandby runs the outage drill (internal/outagetest)
// on a secured pair of its own: the primary is killed with SIGKILL under
// load, the standby promoted 15 s later, and the store, opened on a
// multi-host URL with target_session_attrs=read-write, must write again in
// the same process with every acknowledged deposit kept (replication is
// synchronous).
func TestFailoverToPromotedStandby(t *testing.T) {
	pgtest.HA(t) // the pair's servers are installed and run here
	pair := privatePair(t)
	u := pair.WithPassword(pair.Primary)
	standbyHost := hostOf(t, pair.Standby)
	multi := strings.Replace(u, "127.0.0.1:"+portOf(t, pair.Primary), "127.0.0.1:"+portOf(t, pair.Primary)+","+standbyHost, 1)
	multi = pgtest.WithParam(pgtest.WithParam(multi, "target_session_attrs", "read-write"), "migrate", "true")
	ctx := t.Context()
	s, err := postgres.Open(ctx, multi)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	outagetest.Run(t, outagetest.Config{
		Journal: s.Journal(), Snapshots: s.Snapshots(), Probe: outagetest.WriteProbe(s.Journal()),
		Services: func(cmd string) {
			switch cmd {
			case "down": // the primary dies
				if err := syscall.Kill(postmasterPID(t, pair.dir, "primary"), syscall.SIGKILL); err != nil {
					t.Fatalf("kill the primary: %v", err)
				}
			case "up": // the standby becomes the primary
				conn, err := pgx.Connect(ctx, pair.WithPassword(pair.Standby))
				if err != nil {
					t.Fatalf("connect to the standby: %v", err)
				}
				defer conn.Close(ctx)
				var promoted bool
				if err := conn.QueryRow(ctx, `SELECT pg_promote(true, 60)`).Scan(&promoted); err != nil || !promoted {
					t.Fatalf("promote the standby: %v (promoted %v)", err, promoted)
				}
			}
		},
	})
}

// privateHA is a secured pair of a test's own, in a services folder of its
// own.
type privateHA struct {
	pgtest.HAPair
	dir string
}

// privatePair starts a pair through scripts/services in a new folder and
// stops it when the test ends.
func privatePair(t *testing.T) privateHA {
	t.Helper()
	dir, err := os.MkdirTemp("", "annals-ha-")
	if err != nil {
		t.Fatal(err)
	}
	// As root the servers run as the postgres user, which must reach it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := servicescript.Path()
	if err != nil {
		t.Fatal(err)
	}
	services := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "ANNALS_SERVICES_DIR="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/services %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		services("down", "postgres-ha")
		_ = os.RemoveAll(dir)
	})
	services("up", "postgres-ha")
	env := map[string]string{}
	for _, line := range strings.Split(services("env", "postgres-ha"), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if ok {
			unq, err := strconv.Unquote(`"` + strings.NewReplacer(`\?`, `?`, `\&`, `&`).Replace(v) + `"`)
			if err != nil {
				unq = v
			}
			env[k] = unq
		}
	}
	p := privateHA{dir: dir, HAPair: pgtest.HAPair{
		Primary: env["ANNALS_TEST_POSTGRES_HA"], Standby: env["ANNALS_TEST_POSTGRES_HA_STANDBY"],
		PasswordFile: env["ANNALS_TEST_POSTGRES_HA_PASSWORD_FILE"], Certs: env["ANNALS_TEST_POSTGRES_HA_CERTS"],
	}}
	b, err := os.ReadFile(p.PasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	p.Password = strings.TrimSpace(string(b))
	return p
}

// postmasterPID returns the pid of the pair's server (primary or
// standby) in services folder dir.
func postmasterPID(t *testing.T, dir, role string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "postgres-ha-"+role, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	return pid
}

func hostOf(t *testing.T, dsn string) string {
	t.Helper()
	_, rest, _ := strings.Cut(dsn, "@")
	host, _, _ := strings.Cut(rest, "/")
	return host
}

func portOf(t *testing.T, dsn string) string {
	t.Helper()
	_, port, _ := strings.Cut(hostOf(t, dsn), ":")
	return port
}
