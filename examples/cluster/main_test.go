package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// serviceEnv makes the test binary run the service instead of the tests:
// the tests start their member processes this way.
const serviceEnv = "ANNALS_EXAMPLE_CLUSTER_SERVICE"

func TestMain(m *testing.M) {
	if os.Getenv(serviceEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, os.Args[1:], os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "cluster:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The lease time of the member processes: short, so that the tests are;
// the take-over bound is stated in it.
const leaseTime = 4 * time.Second

// kafkaSession is the session timeout of the member processes on the
// Kafka journal: the broker's least (group.min.session.timeout.ms).
const kafkaSession = 6 * time.Second

// kafkaPartitions is the partition count of the accounts' topic.
const kafkaPartitions = 12

// leaseFor returns the lease time (session timeout on Kafka) of the
// members on the store at url.
func leaseFor(url string) time.Duration {
	if strings.HasPrefix(url, "kafka://") {
		return kafkaSession
	}
	return leaseTime
}

// kafkaParts returns the brokers and topic prefix of a kafka:// URL
// storeURL made.
func kafkaParts(t *testing.T, url string) (brokers []string, prefix string) {
	t.Helper()
	rest, _ := strings.CutPrefix(url, "kafka://")
	hosts, rest, _ := strings.Cut(rest, "/?topic_prefix=")
	prefix, _, _ = strings.Cut(rest, "&")
	return strings.Split(hosts, ","), prefix
}

// storeURL returns the URL of a new, migrated store of the kind named.
func storeURL(t *testing.T, kind string) string {
	t.Helper()
	ctx := t.Context()
	switch kind {
	case "kafka":
		brokers := kafkatest.Real(t)
		prefix := kafkatest.Prefix(t, brokers, "cluster")
		kafkatest.CreateTopic(t, brokers, prefix+bank.EntityType, kafkaPartitions)
		dsn, _ := pgtest.Schema(t)
		readModel, _ := pgtest.Schema(t)
		return "kafka://" + strings.Join(brokers, ",") + "/?topic_prefix=" + prefix + "&eventual=" + pgtest.WithParam(dsn, "migrate", "true") + "&readmodel=" + readModel
	case "postgres":
		dsn, _ := pgtest.Schema(t)
		s, err := postgres.Open(ctx, pgtest.WithParam(dsn, "migrate", "true"))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return dsn
	case "cassandra":
		u, _ := cassandratest.URL(t)
		s, err := cassandra.Open(ctx, u, cassandra.WithMigrate(true))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		// The balance read model, and the leases of its projection's
		// instances, in a PostgreSQL schema; the tag query walks the
		// time buckets from an hour ago, and waits out a short delay.
		readModel, _ := pgtest.Schema(t)
		first := time.Now().UTC().Add(-time.Hour).Format("20060102T15:04")
		return u + "?eventual_consistency_delay=200ms&first_time_bucket=" + first + "&readmodel=" + readModel
	case "sqlite":
		return "sqlite:" + filepath.Join(t.TempDir(), "bank.db")
	}
	t.Fatalf("no store %q", kind)
	return ""
}

// proc is one member process.
type proc struct {
	name, addr string
	cmd        *exec.Cmd
	exited     chan struct{}
	err        error // of the process, once exited is closed
	mu         sync.Mutex
	out        strings.Builder
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startThree runs members a, b and c and waits until they share the
// units.
func startThree(t *testing.T, url string) []*proc {
	t.Helper()
	procs := []*proc{start(t, url, "a", freeAddr(t)), start(t, url, "b", freeAddr(t)), start(t, url, "c", freeAddr(t))}
	awaitCovered(t, 30*time.Second, 10, procs...)
	return procs
}

// start runs a member process and waits until it serves.
func start(t *testing.T, url, name, addr string, extra ...string) *proc {
	t.Helper()
	p, err := launch(t, url, name, addr, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// launch runs a member process and waits until it serves or exits.
func launch(t *testing.T, url, name, addr string, extra ...string) (*proc, error) {
	t.Helper()
	args := append([]string{"-store", url, "-name", name, "-listen", addr, "-lease", leaseFor(url).String()}, extra...)
	if strings.HasPrefix(url, "kafka://") {
		_, prefix := kafkaParts(t, url)
		args = append(args, "-cluster", prefix+"group") // deleted with the test's topics
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), serviceEnv+"=1")
	p := &proc{name: name, addr: addr, cmd: cmd, exited: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &lockedWriter{p: p}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if strings.Contains(sc.Text(), "serving on") {
				once.Do(func() { close(ready) })
			}
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("member %s output:\n%s", name, p.output())
		}
	})
	select {
	case <-ready:
		return p, nil
	case <-p.exited:
		return p, fmt.Errorf("member %s exited before serving: %v\n%s", name, p.err, p.output())
	case <-time.After(time.Minute):
		return p, fmt.Errorf("member %s did not serve within a minute:\n%s", name, p.output())
	}
}

type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// memberStatus is a member's /cluster answer.
type memberStatus struct {
	Member string   `json:"member"`
	Held   []string `json:"held"`
	Units  []string `json:"units"`
	All    int      `json:"all_units"`
}

var plainClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func getStatus(addr string) (memberStatus, error) {
	resp, err := plainClient.Get("http://" + addr + "/cluster")
	if err != nil {
		return memberStatus{}, err
	}
	defer resp.Body.Close()
	var s memberStatus
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// awaitCovered waits until the members hold every unit (slice range, or
// partition on Kafka) once between them, each at least minEach of them (or
// its even share when that is less), and returns how long it took.
func awaitCovered(t *testing.T, bound time.Duration, minEach int, procs ...*proc) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < bound {
		held, dup, ok, all := map[string]bool{}, false, true, 0
		var counts []int
		for _, p := range procs {
			s, err := getStatus(p.addr)
			if err != nil {
				ok = false
				last = err.Error()
				break
			}
			all = s.All
			counts = append(counts, len(s.Units))
			ok = ok && len(s.Units) >= min(minEach, s.All/len(procs))
			for _, h := range s.Units {
				dup = dup || held[h]
				held[h] = true
			}
		}
		if ok && !dup && all > 0 && len(held) == all {
			return time.Since(start)
		}
		if ok {
			last = fmt.Sprintf("held %v, %d of %d units covered, duplicates %v", counts, len(held), all, dup)
		}
		time.Sleep(100 * time.Millisecond) // polling other processes: no signal to await
	}
	t.Fatalf("the members did not cover the ranges within %v: %s", bound, last)
	return 0
}

// accountID returns the id of account i. Ids that differ only in a
// counter have neighbouring slices (an id's slice comes from its Java
// string hash, as in Akka), so the counter is scrambled to spread the
// accounts over the ranges as real ids (UUIDs, names) spread.
func accountID(i int) string {
	return "acct-" + strconv.FormatUint(uint64(i+1)*0x9E3779B97F4A7C15, 36)
}

// load sends deposits of one cent to random accounts through random live
// members, as clients behind a load balancer would, and counts outcomes.
type load struct {
	accounts int
	members  atomic.Pointer[[]*proc]
	stop     chan struct{}
	wg       sync.WaitGroup

	mu        sync.Mutex
	acked     map[string]int64 // answered 200: stored
	unknown   map[string]int64 // answered otherwise or not at all: maybe stored
	failures  []string         // answers other than 200
	notSent   int              // refused connections: never reached a member
	conflicts int
	servedBy  map[string]int
	routes    map[string]int           // entry member -> serving member: requests answered 200
	routeTime map[string]time.Duration // and their total latency
	ok        int
}

func newLoad(accounts int, members ...*proc) *load {
	l := &load{accounts: accounts, stop: make(chan struct{}), acked: map[string]int64{}, unknown: map[string]int64{}, servedBy: map[string]int{}, routes: map[string]int{}, routeTime: map[string]time.Duration{}}
	l.setMembers(members...)
	return l
}

func (l *load) setMembers(ps ...*proc) { l.members.Store(&ps) }

func (l *load) run(workers int) {
	for range workers {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ms := *l.members.Load()
				p := ms[rand.IntN(len(ms))]
				id := accountID(rand.IntN(l.accounts))
				sent := time.Now()
				resp, err := plainClient.Post("http://"+p.addr+"/accounts/"+id+"/deposit?amount=1", "text/plain", nil)
				l.record(id, resp, err, p.name, time.Since(sent))
			}
		})
	}
}

func (l *load) record(id string, resp *http.Response, err error, entry string, took time.Duration) {
	var body []byte
	if err == nil {
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && isRefused(err):
		l.notSent++
	case err != nil:
		l.unknown[id]++
		l.failures = append(l.failures, err.Error())
	case resp.StatusCode == http.StatusOK:
		l.acked[id]++
		l.ok++
		by := resp.Header.Get("Served-By")
		l.servedBy[by]++
		route := entry + "->" + by
		l.routes[route]++
		l.routeTime[route] += took
	default:
		l.unknown[id]++
		l.failures = append(l.failures, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body))))
		if strings.Contains(string(body), "sequence") {
			l.conflicts++
		}
	}
}

// isRefused reports a connection that was refused: the request never left.
func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

func (l *load) halt() {
	close(l.stop)
	l.wg.Wait()
}

// verify checks every account through member p: its balance counts every
// acknowledged deposit, and no more than those plus the ones whose outcome
// is unknown.
func (l *load) verify(t *testing.T, p *proc) {
	t.Helper()
	for i := range l.accounts {
		id := accountID(i)
		resp, err := plainClient.Get("http://" + p.addr + "/accounts/" + id)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("balance of %s: %d %s", id, resp.StatusCode, body)
		}
		got, _ := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
		if got < l.acked[id] || got > l.acked[id]+l.unknown[id] {
			t.Errorf("%s holds %d cents; acknowledged %d, outcome unknown %d", id, got, l.acked[id], l.unknown[id])
		}
	}
}

// verifyReadModel waits until the balance read model, read through p,
// holds every account's balance as the accounts themselves report it: each
// event applied exactly once across the instances' moves (an event applied
// twice, or skipped, fails the projection's handler and stalls it).
func (l *load) verifyReadModel(t *testing.T, p *proc) {
	t.Helper()
	want := map[string]int64{}
	for i := range l.accounts {
		id := accountID(i)
		resp, err := plainClient.Get("http://" + p.addr + "/accounts/" + id)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if n, _ := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64); n > 0 {
			want[id] = n
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	var got map[string]int64
	for {
		resp, err := plainClient.Get("http://" + p.addr + "/balances")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusNotFound {
			resp.Body.Close()
			t.Fatal("no read model on this store")
		}
		got = map[string]int64{}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the projections catch up in other processes
	}
	for id, n := range want {
		if got[id] != n {
			t.Errorf("read model: %s at %d, the account holds %d", id, got[id], n)
		}
	}
}

func (l *load) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var routes []string
	for r, n := range l.routes {
		routes = append(routes, fmt.Sprintf("%s %d (mean %v)", r, n, (l.routeTime[r]/time.Duration(n)).Round(10*time.Microsecond)))
	}
	slices.Sort(routes)
	return fmt.Sprintf("%d acknowledged, %d failed, %d refused connections, %d sequence conflicts, served by %v; routes %s", l.ok, len(l.failures), l.notSent, l.conflicts, l.servedBy, strings.Join(routes, ", "))
}

// storeKinds are the stores the processes share, each run when its server
// is reachable (SQLite always: processes on one machine).
var storeKinds = []string{"postgres", "cassandra", "sqlite", "kafka"}

// TestKillOneMemberUnderLoad: three member processes under steady load;
// one is killed (SIGKILL). Its ranges are served again within the lease
// time plus a few seconds; every acknowledged deposit is in the journal;
// every command is answered or failed with an error the caller can retry
// (503 while its account moves); no sequence conflicts.
func TestKillOneMemberUnderLoad(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			url := storeURL(t, kind)
			procs := startThree(t, url)
			a, b, c := procs[0], procs[1], procs[2]
			l := newLoad(50, a, b, c)
			l.run(8)
			time.Sleep(2 * time.Second) // load before the kill
			l.setMembers(a, b)          // the balancer's health check takes c out...
			if err := c.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-c.exited
			lease := leaseFor(url)
			took := awaitCovered(t, lease+10*time.Second, 1, a, b)
			time.Sleep(time.Second) // load after the take-over
			l.halt()
			t.Logf("%s: ranges served again %v after SIGKILL (lease %v); %s; failures %q", kind, took.Round(100*time.Millisecond), lease, l.summary(), l.failures)
			if took > lease+5*time.Second {
				t.Errorf("the killed member's ranges were served again after %v, want within the lease time %v plus 5 s", took, lease)
			}
			for _, f := range l.failures {
				// 503: the account was moving for longer than the wait; 502:
				// the owner died with the command, outcome unknown; a
				// broken connection: the member died with it.
				if !strings.HasPrefix(f, "503 ") && !strings.HasPrefix(f, "502 ") && !strings.Contains(f, "connection reset") && !strings.Contains(f, "EOF") {
					t.Errorf("a command failed with an error the caller cannot retry: %s", f)
				}
			}
			if l.conflicts > 0 {
				t.Errorf("%d sequence conflicts: an account was written by two members", l.conflicts)
			}
			checkOneWriter(t, url)
			l.verify(t, a)
			l.verifyReadModel(t, b)
		})
	}
}

// TestRollingRestartAndJoin: each of three members in turn is stopped
// (SIGTERM: it hands its accounts off) and started again, under load,
// then a fourth joins: no command fails, no sequence conflicts, and every
// acknowledged deposit is kept.
func TestRollingRestartAndJoin(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			url := storeURL(t, kind)
			procs := startThree(t, url)
			l := newLoad(50, procs...)
			l.run(8)
			for i, p := range procs {
				others := append(append([]*proc(nil), procs[:i]...), procs[i+1:]...)
				l.setMembers(others...)
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				<-p.exited
				if p.err != nil || !strings.Contains(p.output(), "left") {
					t.Fatalf("member %s after SIGTERM: %v\n%s", p.name, p.err, p.output())
				}
				procs[i] = start(t, url, p.name, p.addr)
				l.setMembers(procs...)
				awaitCovered(t, 30*time.Second, 10, procs...)
			}
			d := start(t, url, "d", freeAddr(t))
			procs = append(procs, d)
			l.setMembers(procs...)
			awaitCovered(t, 30*time.Second, 8, procs...)
			l.halt()
			t.Logf("%s: %s", kind, l.summary())
			for _, f := range l.failures {
				t.Errorf("a command failed during the rolling restart: %s", f)
			}
			if l.conflicts > 0 {
				t.Errorf("%d sequence conflicts", l.conflicts)
			}
			checkOneWriter(t, url)
			l.verify(t, d)
			l.verifyReadModel(t, d)
		})
	}
}

// TestPausedMemberWritesNothingForLostRanges: a member stopped (SIGSTOP)
// past its lease loses its ranges to the others, who write to every
// account meanwhile; resumed (SIGCONT), it writes nothing for the ranges
// it lost: any such write would meet the others' sequence numbers, so
// there is no sequence conflict, and every acknowledged deposit is kept.
//
// That holds for every write, also one the pause caught between the
// member's clock check and the store: PostgreSQL checks the lease's token
// where the write commits (journal.FencedWriter), and the Kafka brokers
// refuse records sent under the member's claim of a partition once
// another member claimed it (kafka.Claim); on Kafka no two appends of an
// account overlap (checkOneWriter).
func TestPausedMemberWritesNothingForLostRanges(t *testing.T) {
	for _, kind := range []string{"postgres", "kafka"} {
		t.Run(kind, func(t *testing.T) {
			url := storeURL(t, kind)
			procs := startThree(t, url)
			a, b, c := procs[0], procs[1], procs[2]
			const accounts, clients = 20, 8
			l := newLoad(accounts, a, b, c)
			l.run(clients)
			time.Sleep(time.Second)
			if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			l.setMembers(a, b) // requests already sent to c wait for it
			awaitCovered(t, leaseFor(url)+10*time.Second, 1, a, b)
			// Requests that reached c, or that a and b forwarded to it, wait for
			// it; fresh clients go on through a and b, which write to every
			// account while c is stopped.
			l.run(clients)
			l.mu.Lock()
			before := make(map[string]int64, accounts)
			for id, n := range l.acked {
				before[id] = n
			}
			l.mu.Unlock()
			deadline := time.Now().Add(20 * time.Second)
			for {
				l.mu.Lock()
				all := true
				for i := range accounts {
					id := accountID(i)
					all = all && l.acked[id] > before[id]
				}
				l.mu.Unlock()
				if all {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("not every account was written while c was stopped")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			l.setMembers(a, b, c)
			awaitCovered(t, 30*time.Second, 10, a, b, c)
			l.halt()
			t.Logf("%s", l.summary())
			if l.conflicts > 0 {
				t.Errorf("%d sequence conflicts: the resumed member wrote for ranges it had lost", l.conflicts)
			}
			checkOneWriter(t, url)
			l.verify(t, a)
			l.verifyReadModel(t, c)
		})
	}
}

// TestMemberNameTaken: a process that joins under the name of a live
// member is refused, naming the problem; the live member is unaffected.
func TestMemberNameTaken(t *testing.T) {
	url := storeURL(t, "sqlite")
	a := start(t, url, "a", freeAddr(t))
	p, err := launch(t, url, "a", freeAddr(t))
	if err == nil {
		t.Fatal("a second member named a started")
	}
	if !strings.Contains(p.output(), "name taken") {
		t.Errorf("the refused member's output does not say the name is taken:\n%s", p.output())
	}
	if s, err := getStatus(a.addr); err != nil || len(s.Held) != cluster.DefaultRanges+balanceInstances {
		t.Errorf("the live member after the refused join: %+v, %v", s, err)
	}
}

// checkOneWriter reads the accounts' Kafka topic (on a kafka:// store;
// other stores refuse a second writer of a sequence number themselves,
// which the load counts as a conflict) and fails t when two appends of one
// account overlap: two members wrote for it past the fence.
func checkOneWriter(t *testing.T, url string) {
	t.Helper()
	if !strings.HasPrefix(url, "kafka://") {
		return
	}
	brokers, prefix := kafkaParts(t, url)
	topic := prefix + bank.EntityType
	// Control records (the markers that end the members' transactions)
	// take offsets too: kept, they bring the read to the end offsets.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := endOffsets(t.Context(), cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	last := map[string]int64{}
	read := map[int32]int64{}
	appends, overlaps := 0, 0
	for !caughtUp(read, ends) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (read %v of %v)", topic, ctx.Err(), read, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			for _, h := range r.Headers {
				if h.Key != wire.HeaderKey {
					continue
				}
				hd, ok, err := wire.DecodeHeader(h.Value)
				if err != nil || !ok || hd.Kind != wire.Append {
					continue
				}
				appends++
				id := string(r.Key)
				if hd.From <= last[id] {
					overlaps++
					t.Errorf("%s: an append of %d..%d after one up to %d: two writers", id, hd.From, hd.To, last[id])
				}
				last[id] = max(last[id], hd.To)
			}
		})
	}
	t.Logf("%s: %d appends of %d accounts read, %d overlapping", topic, appends, len(last), overlaps)
}

// endOffsets returns the end offset of each partition of topic.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(kafkaPartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, err
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}

// caughtUp reports that read has reached every end.
func caughtUp(read, ends map[int32]int64) bool {
	for p, end := range ends {
		if read[p] < end {
			return false
		}
	}
	return true
}
