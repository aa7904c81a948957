package cassandratest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/internal/servicescript"
	"github.com/annals-go/annals/store/cassandra"
)

// DefaultRing is the contact points of the ring `scripts/services up
// cassandra-ring` starts: three nodes, one on each loopback address, with
// the same CQL port.
const DefaultRing = "127.0.0.2:9042,127.0.0.3:9042,127.0.0.4:9042"

// RingReplication is the replication factor of a ring test's keyspace.
const RingReplication = 3

// RingContactPoints returns the ring's host:port contact points:
// ANNALS_TEST_CASSANDRA_RING (comma-separated) when set, DefaultRing
// otherwise.
func RingContactPoints() []string {
	v := os.Getenv("ANNALS_TEST_CASSANDRA_RING")
	if v == "" {
		v = DefaultRing
	}
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
}

// RingRequired reports whether ANNALS_TEST_REQUIRE lists cassandra-ring.
func RingRequired() bool {
	return slices.Contains(strings.FieldsFunc(os.Getenv("ANNALS_TEST_REQUIRE"), func(r rune) bool { return r == ',' || r == ' ' }), "cassandra-ring")
}

// A RingServers is the ring of `scripts/services up cassandra-ring`, as a
// test sees it: its contact points, and the nodes' pid files, through
// which the test kills nodes.
type RingServers struct {
	// Hosts are the contact points, host:port, one per node.
	Hosts []string
	// pidFiles are the nodes' pid files, in the order of Hosts.
	pidFiles []string
	script   string // scripts/services
	t        testing.TB
	restore  bool // a node was killed: Cleanup brings the ring back
}

// Ring returns the ring after checking that every node accepts
// connections. When one does not, t is skipped, or failed when
// RingRequired. Tests that kill nodes must be its only users (the ring is
// a service of its own, not the cassandra node other tests share), and
// run one after another, never in parallel.
func Ring(t testing.TB) *RingServers {
	t.Helper()
	hosts := RingContactPoints()
	for _, h := range hosts {
		conn, err := net.DialTimeout("tcp", h, 3*time.Second)
		if err != nil {
			if RingRequired() {
				t.Fatalf("the Cassandra ring at %s is required (ANNALS_TEST_REQUIRE) and %s does not answer: %v", strings.Join(hosts, ","), h, err)
			}
			t.Skipf("no Cassandra ring at %s (%s: %v): run `scripts/services up cassandra-ring`, or set ANNALS_TEST_CASSANDRA_RING", strings.Join(hosts, ","), h, err)
		}
		conn.Close()
	}
	script, err := servicescript.Path()
	if err != nil {
		t.Fatal(err)
	}
	r := &RingServers{Hosts: hosts, script: script, t: t}
	env, err := r.services(t.Context(), "env")
	if err != nil {
		t.Fatal(err)
	}
	vars := exports(env)
	if got := vars["ANNALS_TEST_CASSANDRA_RING"]; got != strings.Join(hosts, ",") {
		t.Fatalf("the tests' ring is %s, the ring of scripts/services (ANNALS_SERVICES_DIR=%q) is %s: killing its nodes would not test this one",
			strings.Join(hosts, ","), os.Getenv("ANNALS_SERVICES_DIR"), got)
	}
	r.pidFiles = strings.Split(vars["ANNALS_TEST_CASSANDRA_RING_PIDS"], ",")
	if len(r.pidFiles) != len(hosts) {
		t.Fatalf("scripts/services env cassandra-ring names %d pid files for %d nodes:\n%s", len(r.pidFiles), len(hosts), env)
	}
	t.Cleanup(r.restoreRing)
	if err := r.awaitSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	return r
}

// URL returns a store URL naming every contact point and a keyspace
// unique to this run (created by the caller's Open WithMigrate with
// replication factor RingReplication, which the URL sets), followed by
// params (a query string without '?', may be empty). The keyspace is
// dropped at the end of the test, after the ring is whole again (the
// driver waits, up to a minute, for every node to agree on a schema
// change).
func (r *RingServers) URL(params string) (rawURL, keyspace string) {
	r.t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	keyspace = "annals_ring_" + hex.EncodeToString(b[:])
	r.t.Cleanup(func() {
		r.restoreRing() // first: a schema change waits for every node
		r.drop(keyspace)
	})
	q := "replication_factor=" + strconv.Itoa(RingReplication)
	if params != "" {
		q += "&" + params
	}
	return "cassandra://" + strings.Join(r.Hosts, ",") + "/" + keyspace + "?" + q, keyspace
}

// Kill kills node i (0-based, the node of Hosts[i]) with SIGKILL and
// returns once its process is gone. The ring is brought back when the
// test ends (Up).
func (r *RingServers) Kill(i int) {
	r.t.Helper()
	r.restore = true
	pid, err := r.pid(i)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		r.t.Fatalf("kill node %s (pid %d): %v", r.Hosts[i], pid, err)
	}
	// Not our child: poll until it is gone (a killed process goes within
	// milliseconds; the bound is for a machine under load).
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			r.t.Fatalf("node %s (pid %d) still runs 30 s after SIGKILL", r.Hosts[i], pid)
		}
		<-tick.C
	}
}

// Up starts every node that does not run (`scripts/services up
// cassandra-ring`) and returns once each serves CQL and sees the others
// up.
func (r *RingServers) Up() {
	r.t.Helper()
	if out, err := r.services(r.t.Context(), "up"); err != nil {
		r.t.Fatalf("%v\n%s", err, out)
	}
}

// restoreRing brings the ring back when a node was killed: at the end of
// the test, with a time of its own (the test's context has ended).
func (r *RingServers) restoreRing() {
	if !r.restore {
		return
	}
	r.restore = false
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := r.services(ctx, "up"); err != nil {
		r.t.Errorf("bring the ring back: %v\n%s", err, out)
		return
	}
	if err := r.awaitSchema(ctx); err != nil {
		r.t.Error(err)
	}
}

// awaitSchema waits until the nodes agree on the schema. A node started
// again pulls the schema changes it missed from the others; a schema
// change made before it has (creating or dropping a keyspace) can fail
// with "Unknown CF". On a loaded machine a node has been seen to keep its
// own version for minutes after such a start: when a minute passes
// without agreement, a node whose version differs from the other two is
// started again (its start pulls the schema), at most twice.
func (r *RingServers) awaitSchema(ctx context.Context) error {
	for restarts := 0; ; restarts++ {
		err := r.agreement(ctx, time.Minute)
		if err == nil || restarts == 2 || ctx.Err() != nil {
			return err
		}
		odd, versions := r.oddNode(ctx)
		if odd < 0 {
			r.t.Logf("no schema agreement after a minute (versions by node: %v); waiting again", versions)
			continue
		}
		r.t.Logf("no schema agreement after a minute (versions by node: %v): starting node %s again", versions, r.Hosts[odd])
		r.Kill(odd)
		if out, err := r.services(ctx, "up"); err != nil {
			return fmt.Errorf("start node %s again: %w\n%s", r.Hosts[odd], err, out)
		}
	}
}

// agreement waits, at most limit, until the nodes agree on the schema.
func (r *RingServers) agreement(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cluster := gocql.NewCluster(r.Hosts...)
	cluster.Timeout = 30 * time.Second
	cluster.MaxWaitSchemaAgreement = limit
	if _, p, err := net.SplitHostPort(r.Hosts[0]); err == nil {
		cluster.Port, _ = strconv.Atoi(p)
	}
	session, err := cluster.CreateSession()
	if err != nil {
		return fmt.Errorf("wait for the ring's schema agreement: %w", err)
	}
	defer session.Close()
	if err := session.AwaitSchemaAgreement(ctx); err != nil {
		return fmt.Errorf("wait for the ring's schema agreement: %w", err)
	}
	return nil
}

// oddNode returns the index of the node whose schema version (its own
// system.local's) differs from the other nodes', which agree; -1 when
// there is no such node or a node does not answer. It also returns each
// node's version, for the log.
func (r *RingServers) oddNode(ctx context.Context) (int, map[string]string) {
	versions := map[string]string{}
	byVersion := map[string][]int{}
	for i, h := range r.Hosts {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			return -1, versions
		}
		cluster := gocql.NewCluster(h)
		cluster.Timeout = 10 * time.Second
		cluster.Port, _ = strconv.Atoi(port)
		cluster.HostFilter = gocql.WhiteListHostFilter(host)
		session, err := cluster.CreateSession()
		if err != nil {
			versions[h] = "unreachable"
			return -1, versions
		}
		var v gocql.UUID
		err = session.Query(`SELECT schema_version FROM system.local`).WithContext(ctx).Scan(&v)
		session.Close()
		if err != nil {
			versions[h] = "unreadable"
			return -1, versions
		}
		versions[h] = v.String()
		byVersion[v.String()] = append(byVersion[v.String()], i)
	}
	if len(byVersion) != 2 {
		return -1, versions
	}
	for _, nodes := range byVersion {
		if len(nodes) == 1 && len(r.Hosts)-1 > 1 {
			return nodes[0], versions
		}
	}
	return -1, versions
}

// pid reads node i's pid file.
func (r *RingServers) pid(i int) (int, error) {
	b, err := os.ReadFile(r.pidFiles[i])
	if err != nil {
		return 0, fmt.Errorf("node %s: %w (is the ring up?)", r.Hosts[i], err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("node %s: pid file %s holds %q", r.Hosts[i], r.pidFiles[i], b)
	}
	return pid, nil
}

// services runs `scripts/services CMD cassandra-ring` in the test's
// environment.
func (r *RingServers) services(ctx context.Context, cmd string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, r.script, cmd, "cassandra-ring").CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s cassandra-ring: %w", r.script, cmd, err)
	}
	return out, nil
}

// drop removes a keyspace of the ring.
func (r *RingServers) drop(keyspace string) {
	cluster := gocql.NewCluster(r.Hosts...)
	cluster.Timeout = time.Minute
	if _, p, err := net.SplitHostPort(r.Hosts[0]); err == nil {
		cluster.Port, _ = strconv.Atoi(p)
	}
	session, err := cluster.CreateSession()
	if err != nil {
		r.t.Errorf("drop the test's keyspace %s: %v", keyspace, err)
		return
	}
	defer session.Close()
	err = retrySchema(context.Background(), func() error {
		return session.Query(`DROP KEYSPACE IF EXISTS ` + keyspace).Exec()
	})
	if err != nil {
		r.t.Errorf("drop the test's keyspace %s: %v", keyspace, err)
	}
}

// Open opens a store with every contact point (URL's, with params) on a
// keyspace of its own, created WithMigrate, closed when the test ends.
func (r *RingServers) Open(params string, opts ...cassandra.Option) (s *cassandra.Store, rawURL string) {
	r.t.Helper()
	u, _ := r.URL(params)
	ctx, cancel := context.WithTimeout(r.t.Context(), 3*time.Minute)
	defer cancel()
	err := retrySchema(ctx, func() error {
		var err error
		s, err = cassandra.Open(ctx, u, append([]cassandra.Option{cassandra.WithMigrate(true)}, opts...)...)
		return err
	})
	if err != nil {
		r.t.Fatalf("open %s: %v", u, err)
	}
	r.t.Cleanup(func() { s.Close() })
	return s, u
}

// retrySchema runs a schema change, again every 2 s for at most two
// minutes while it fails with "Unknown CF": a node of the ring started
// again after SIGKILL refused schema changes so for some 20 s after it
// served CQL and the nodes agreed on the schema version.
func retrySchema(ctx context.Context, change func() error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		err := change()
		if err == nil || !strings.Contains(err.Error(), "Unknown CF") {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%w (still, after two minutes of retries)", err)
		}
	}
}

// exports reads the NAME=value of `export NAME=value` lines.
func exports(out []byte) map[string]string {
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if !ok {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = strings.Trim(v, `'"`)
		}
	}
	return vars
}
