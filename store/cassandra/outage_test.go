package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/internal/outagetest"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// The outage tests stop and start a Cassandra node through
// scripts/services, in this process's environment: the node of
// ANNALS_SERVICES_DIR, which must be set (to a folder of its own: the
// node of the default folder serves every other test), and whose address
// must be the tests' (ANNALS_TEST_CASSANDRA). They run only when
// ANNALS_OUTAGE_DRILL is set:
//
//	export ANNALS_SERVICES_DIR=/tmp/cassdrill
//	scripts/services up cassandra
//	eval "$(scripts/services env cassandra)"
//	ANNALS_OUTAGE_DRILL=1 go test ./store/cassandra -run 'TestReconnectAfterRestart|TestOutageDrill' -v
//	scripts/services down cassandra

// resumeLimit is how long after the node answers again the outage tests
// wait for a write to be acknowledged before they fail: far above the few
// seconds it takes, far below "never" (a session that lost its node kept
// failing for minutes, until its process restarted). It is the drill's.
const resumeLimit = outagetest.ResumeLimit

// drillNode skips t unless ANNALS_OUTAGE_DRILL is set, checks that the
// tests' node is the one scripts/services manages in this environment,
// and returns a function that runs `scripts/services CMD cassandra` and
// returns when it is done (for up: when the node answers).
func drillNode(t *testing.T) (addr string, services func(cmd string)) {
	t.Helper()
	if os.Getenv("ANNALS_OUTAGE_DRILL") == "" {
		t.Skip("stops and starts a Cassandra node: set ANNALS_OUTAGE_DRILL=1 and ANNALS_SERVICES_DIR to a node of its own (see outage_test.go)")
	}
	if os.Getenv("ANNALS_SERVICES_DIR") == "" {
		t.Fatal("ANNALS_OUTAGE_DRILL: set ANNALS_SERVICES_DIR to the folder of a node of the drill's own (scripts/services up cassandra with it), never the shared node's")
	}
	addr = cassandratest.Server(t)
	run := func(cmd string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), "../../scripts/services", cmd, "cassandra").CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/services %s cassandra (ANNALS_SERVICES_DIR=%s): %v\n%s", cmd, os.Getenv("ANNALS_SERVICES_DIR"), err, out)
		}
		return string(out)
	}
	managed := func() string {
		t.Helper()
		env := run("env")
		_, rest, ok := strings.Cut(env, "ANNALS_TEST_CASSANDRA=")
		if !ok {
			t.Fatalf("scripts/services env cassandra printed no address:\n%s", env)
		}
		return strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
	}
	if m := managed(); m != addr {
		t.Fatalf("the tests' node is %s, the node of ANNALS_SERVICES_DIR=%s is %s: the drill would stop another node than it tests",
			addr, os.Getenv("ANNALS_SERVICES_DIR"), m)
	}
	return addr, func(cmd string) {
		t.Helper()
		run(cmd)
		if cmd == "up" {
			if m := managed(); m != addr {
				t.Fatalf("the node came back on %s, not %s", m, addr)
			}
		}
	}
}

// hostIDs records the host ids of the nodes that ran the store's queries.
type hostIDs struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (h *hostIDs) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if q.Host == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[q.Host.HostID()] = true
}

// TestQueriesKnowNodesByHostID: the session's pools know a node by its
// host id (system.local's), the id by which the driver's control
// connection finds it again when it reconnects after a restart of the
// node. This is what TestReconnectAfterRestart needs, checked without a
// restart: a pool host with an id of the driver's making (which it gives
// without DisableInitialHostLookup's lookup) was, on that reconnection,
// removed together with the node's real entry from the host policy, which
// forgets hosts by address; the session then failed every call with "no
// hosts available in the pool" until its process restarted.
func TestQueriesKnowNodesByHostID(t *testing.T) {
	seen := &hostIDs{seen: map[string]bool{}}
	s := cassandratest.Open(t, cassandra.WithQueryObserver(seen))
	ctx := t.Context()
	if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{events("Hosts|1", 1, 1)}); res != nil || err != nil {
		t.Fatal(res, err)
	}
	nodes := map[string]bool{}
	for _, table := range []string{"system.local", "system.peers"} {
		iter := s.Session().Query(`SELECT host_id FROM ` + table).WithContext(ctx).Iter()
		var id gocql.UUID
		for iter.Scan(&id) {
			nodes[id.String()] = true
		}
		if err := iter.Close(); err != nil {
			t.Fatal(err)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.seen) == 0 {
		t.Fatal("the observer saw no query")
	}
	for id := range seen.seen {
		if !nodes[id] {
			t.Errorf("a query ran on a pool host with id %s, which is no node's (the nodes: %v)", id, slices.Sorted(maps.Keys(nodes)))
		}
	}
}

// TestReconnectAfterRestart: a store whose node is stopped and started
// again writes again, in the same process, once the node answers.
// Before the store let the driver look its nodes up, the session's pool
// host was replaced by the node's real one when the control connection
// reconnected, and the replacement removed the node from the host policy:
// every call failed with "no hosts available in the pool" from then on.
func TestReconnectAfterRestart(t *testing.T) {
	_, services := drillNode(t)
	s := cassandratest.Open(t)
	j := s.Journal()
	ctx := t.Context()
	if res, err := j.Write(ctx, []journal.AtomicWrite{events("Reconnect|before", 1, 1)}); res != nil || err != nil {
		t.Fatal(res, err)
	}
	services("down")
	down, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := j.Write(down, []journal.AtomicWrite{events("Reconnect|down", 1, 1)})
	cancel()
	if err == nil {
		t.Fatal("a write while the node is down succeeded")
	}
	t.Logf("while the node is down, a write fails with: %v", err)
	services("up")
	upAt := time.Now()
	// Each attempt writes an id of its own: an attempt whose outcome was
	// unknown does not make the next one a conflict.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for attempt := 0; time.Since(upAt) < resumeLimit; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := j.Write(actx, []journal.AtomicWrite{events(fmt.Sprintf("Reconnect|after-%d", attempt), 1, 1)})
		cancel()
		if err == nil && res == nil {
			t.Logf("first acknowledged write %.1fs after the node answered again (%d attempts)", time.Since(upAt).Seconds(), attempt+1)
			if got := replaySeqs(t, j, "Reconnect|before", 1); !slices.Equal(got, []int64{1}) {
				t.Errorf("the event written before the restart replays as %v, want [1]", got)
			}
			return
		}
		last = cmpErrs(err, res)
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	t.Fatalf("no write acknowledged %v after the node answered again; the last failed with: %v", resumeLimit, last)
}

func cmpErrs(err error, res []error) error {
	if err != nil {
		return err
	}
	return errors.Join(res...)
}

// TestOutageDrill runs the outage drill (package internal/outagetest) on
// the node: it is stopped for 15 s while 32 callers deposit into 1,000
// accounts, then started again; writes must resume in this process
// (within resumeLimit), and the drill also reports when the store itself
// wrote again (a raw journal write beside the load). See the top of the
// file for how to run it.
func TestOutageDrill(t *testing.T) {
	_, services := drillNode(t)
	s := cassandratest.Open(t)
	outagetest.Run(t, outagetest.Config{
		Journal:   s.Journal(),
		Snapshots: s.Snapshots(),
		Services:  services,
		Accounts:  1000,
		Probe:     outagetest.WriteProbe(s.Journal()),
	})
}
