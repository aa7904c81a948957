package main

// The cluster's benchmarks on one PostgreSQL store (the test server of
// pgtest): member processes of this service measured from outside, as a
// client and an operator see them, and the membership's store calls
// counted in this process. They run for minutes, so they run only when
// ANNALS_CLUSTER_BENCH is set, and print their tables with -v:
//
//	ANNALS_CLUSTER_BENCH=1 go test -run 'TestClusterBench' -v -timeout 2h ./examples/cluster/
//
// One part at a time: -run TestClusterBenchThroughput, ...ProxyLatency,
// ...LeaseTraffic or ...TakeOver. ANNALS_CLUSTER_BENCH_RUNS sets the runs
// of each measurement (default 5, alternated), ANNALS_CLUSTER_BENCH_WINDOW
// the measured window of a load run (default 10s) and of the lease traffic
// (default 60s). BenchmarkForwardHop is an ordinary Go benchmark in one
// process on the memory store (go test -bench ForwardHop). The figures and
// what they show are in docs/performance.md ("More than one process").

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/kafka/kafkacluster"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

const (
	// benchEnv turns the benchmarks on.
	benchEnv = "ANNALS_CLUSTER_BENCH"
	// benchIdleEnv, in a member process, sets MaxIdleConnsPerHost of
	// http.DefaultTransport, which the member's forwarding proxy uses
	// (main.go sets no HandlerConfig.Transport): the throughput benchmark
	// runs three members with it beside three with Go's default of 2.
	benchIdleEnv = "ANNALS_CLUSTER_BENCH_IDLE_PER_HOST"
	// benchProfileEnv, in a member process, names a directory: SIGUSR1
	// starts a CPU profile there, SIGUSR2 writes it (the throughput
	// benchmark profiles its measured window when the variable is set).
	benchProfileEnv = "ANNALS_CLUSTER_BENCH_PROFILE"
)

// init sets a member process up for the benchmarks (before TestMain runs
// the service).
func init() {
	if os.Getenv(serviceEnv) != "1" {
		return
	}
	if v := os.Getenv(benchIdleEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			panic(fmt.Sprintf("%s=%q: %v", benchIdleEnv, v, err))
		}
		http.DefaultTransport.(*http.Transport).MaxIdleConnsPerHost = n
	}
	if dir := os.Getenv(benchProfileEnv); dir != "" {
		sig := make(chan os.Signal, 2)
		signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			var f *os.File
			for s := range sig {
				switch {
				case s == syscall.SIGUSR1 && f == nil:
					var err error
					if f, err = os.CreateTemp(dir, "member-*.pprof"); err == nil {
						err = pprof.StartCPUProfile(f)
					}
					if err != nil {
						fmt.Fprintln(os.Stderr, "bench profile:", err)
					}
				case s == syscall.SIGUSR2 && f != nil:
					pprof.StopCPUProfile()
					f.Close()
					f = nil
				}
			}
		}()
	}
}

// benchOn skips t unless the benchmarks are on.
func benchOn(t *testing.T) {
	t.Helper()
	if os.Getenv(benchEnv) == "" {
		t.Skipf("a benchmark of the cluster, minutes long: set %s=1 to run it", benchEnv)
	}
}

// benchRuns returns the number of runs of each measurement.
func benchRuns(t *testing.T) int {
	if v := os.Getenv("ANNALS_CLUSTER_BENCH_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("ANNALS_CLUSTER_BENCH_RUNS=%q", v)
		}
		return n
	}
	return 5
}

// benchWindow returns the measured window, def unless set.
func benchWindow(t *testing.T, def time.Duration) time.Duration {
	if v := os.Getenv("ANNALS_CLUSTER_BENCH_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("ANNALS_CLUSTER_BENCH_WINDOW=%q: %v", v, err)
		}
		return d
	}
	return def
}

// startMembers starts n members (a, b, c, ...) on url with lease time
// lease, one after another, each after a random pause of up to stagger,
// and waits until each holds at least its share rounded down. A member's
// rounds keep the phase its join gave them: the pauses give the members
// random phases relative to one another, as in a service whose processes
// start at any time.
func startMembers(t *testing.T, url string, n int, lease, stagger time.Duration) []*proc {
	t.Helper()
	var procs []*proc
	for i := range n {
		if i > 0 && stagger > 0 {
			time.Sleep(rand.N(stagger))
		}
		procs = append(procs, start(t, url, string(rune('a'+i)), freeAddr(t), "-lease", lease.String()))
	}
	awaitCovered(t, 20*lease+30*time.Second, cluster.DefaultRanges/n, procs...)
	return procs
}

// procCPU returns the CPU time (user and system, all threads) process pid
// has used, from /proc/pid/stat (the kernel's accounting that getrusage
// reads), in clock ticks of 10 ms.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields from the state (3rd of stat): utime is the 14th, stime the 15th.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// selfCPU returns this process's CPU time (the load generator's).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU returns the busy CPU time of the whole machine (every core,
// every process: other users' too), from /proc/stat.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var busy int64
	for i, v := range f[1:min(len(f), 9)] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

// postgresCPU returns the CPU time of every process named postgres, by pid.
func postgresCPU() map[int]time.Duration {
	out := map[int]time.Duration{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, d := range dirs {
		comm, err := os.ReadFile(d)
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if c, err := procCPU(pid); err == nil {
			out[pid] = c
		}
	}
	return out
}

// backendsOf returns the PostgreSQL backends serving the connections of
// processes pids: their sockets' local ports (from /proc/PID/fd and
// /proc/net/tcp) matched to pg_stat_activity's client_port.
func backendsOf(ctx context.Context, pids []int) ([]int, error) {
	u, err := url.Parse(pgtest.DSN())
	if err != nil {
		return nil, err
	}
	pgPort := u.Port()
	if pgPort == "" {
		pgPort = "5432"
	}
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	var ports []int32
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			lport := f[1][strings.LastIndexByte(f[1], ':')+1:]
			rport := f[2][strings.LastIndexByte(f[2], ':')+1:]
			if r, _ := strconv.ParseUint(rport, 16, 16); strconv.FormatUint(r, 10) == pgPort {
				l, _ := strconv.ParseUint(lport, 16, 16)
				ports = append(ports, int32(l))
			}
		}
	}
	conn, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1) AND client_addr IS NOT NULL`, ports)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// timeWaits returns the local TCP sockets in TIME_WAIT whose peer port is
// one of ports: connections to the members that their client side closed.
func timeWaits(ports map[string]bool) map[string]bool {
	out := map[string]bool{}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "06" {
			continue
		}
		_, rport, _ := strings.Cut(f[2], ":")
		p, _ := strconv.ParseUint(rport, 16, 16)
		if ports[strconv.FormatUint(p, 10)] {
			out[f[1]+"-"+f[2]] = true
		}
	}
	return out
}

// benchLoad is a closed-loop load of deposits: workers each send one
// request at a time, to a random account through a random member, over
// kept-alive connections, as clients behind a load balancer would. It
// counts the requests answered within the measured window and keeps their
// latencies, apart for those served by the member they were sent to and
// those it forwarded.
type benchLoad struct {
	members  atomic.Pointer[[]*proc]
	accounts int
	client   *http.Client
	// direct sends each request to the member that served its account
	// last (learnt from Served-By), as a client that knows the owners
	// would: no forwarding once the owners are known.
	direct  bool
	owners  sync.Map     // account id -> *proc
	phase   atomic.Int32 // 0 warm-up, 1 measured, 2 stopping
	acked   atomic.Int64 // 200s in every phase: deposits of one cent
	wg      sync.WaitGroup
	workers []*benchWorker
}

type benchWorker struct {
	local, forwarded []time.Duration // 200s within the window
	failed           int             // other answers within the window
	unavailable      int             // of which MoveWait passed (503, or 502 "does not answer")
	failures         []string        // the first few
	slowest          time.Duration   // of every request, window or not
}

func newBenchLoad(accounts, workers int, members ...*proc) *benchLoad {
	l := &benchLoad{
		accounts: accounts,
		client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{
			MaxIdleConnsPerHost: workers, DisableCompression: true,
		}},
		workers: make([]*benchWorker, workers),
	}
	l.members.Store(&members)
	return l
}

func (l *benchLoad) run() {
	for i := range l.workers {
		w := &benchWorker{}
		l.workers[i] = w
		l.wg.Go(func() {
			for l.phase.Load() < 2 {
				ms := *l.members.Load()
				p := ms[rand.IntN(len(ms))]
				id := accountID(rand.IntN(l.accounts))
				if o, ok := l.owners.Load(id); ok && l.direct {
					p = o.(*proc)
				}
				sent := time.Now()
				resp, err := l.client.Post("http://"+p.addr+"/accounts/"+id+"/deposit?amount=1", "text/plain", nil)
				var body []byte
				if err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				took := time.Since(sent)
				w.slowest = max(w.slowest, took)
				if err == nil && resp.StatusCode == http.StatusOK {
					l.acked.Add(1)
					if by := resp.Header.Get("Served-By"); l.direct && by != p.name {
						if i := slices.IndexFunc(ms, func(x *proc) bool { return x.name == by }); i >= 0 {
							l.owners.Store(id, ms[i])
						}
					}
				}
				if l.phase.Load() != 1 {
					continue
				}
				switch {
				case err != nil:
					w.fail(err.Error())
				case resp.StatusCode != http.StatusOK:
					// MoveWait passed: the range had no owner (503), or its
					// owner's address refused every connection (502).
					if resp.StatusCode == http.StatusServiceUnavailable || (resp.StatusCode == http.StatusBadGateway && strings.Contains(string(body), "does not answer")) {
						w.unavailable++
					}
					w.fail(fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body))))
				case resp.Header.Get("Served-By") == p.name:
					w.local = append(w.local, took)
				default:
					w.forwarded = append(w.forwarded, took)
				}
			}
		})
	}
}

func (w *benchWorker) fail(s string) {
	w.failed++
	if len(w.failures) < 3 {
		w.failures = append(w.failures, s)
	}
}

func (l *benchLoad) halt() {
	l.phase.Store(2)
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

// loadResult is one measured window of a benchLoad.
type loadResult struct {
	window           time.Duration
	local, forwarded []time.Duration // sorted
	failed           int
	failures         []string
	memberCPU        time.Duration // of the member processes in the window
	backendCPU       time.Duration // of the PostgreSQL backends serving them
	loadCPU          time.Duration // of the load generator (this process)
	machineCPU       time.Duration // of the whole machine, other users' work included
	behind           int64         // events the read model had not applied when the load stopped
	catchUp          time.Duration // and the time it took to apply them
	eventsPerTx      float64       // events per journal transaction, warm-up included
	idleMembers      time.Duration // CPU per second of the members before the load
	idleBackends     time.Duration // and of their backends
	newConns         int           // connections to members closed by their client side (TIME_WAIT)
}

func (r loadResult) ok() int { return len(r.local) + len(r.forwarded) }

// perSec returns the commands answered 200 per second.
func (r loadResult) perSec() float64 { return float64(r.ok()) / r.window.Seconds() }

// perCommand returns d per command answered.
func (r loadResult) perCommand(d time.Duration) time.Duration {
	return d / time.Duration(max(1, r.ok()))
}

// cpuPerCommand returns the members' CPU time per command answered.
func (r loadResult) cpuPerCommand() time.Duration { return r.perCommand(r.memberCPU) }

// measure runs l for a warm-up, then measures a window of it: the
// requests answered within it, the CPU time of the members, of their
// PostgreSQL backends, of this process and of the machine, and the
// connections to the members that were closed (the members profiled when
// benchProfileEnv is set); then how far the read model was behind.
func (l *benchLoad) measure(t *testing.T, warmUp, window time.Duration) loadResult {
	t.Helper()
	l.run()
	time.Sleep(warmUp)
	ports := map[string]bool{}
	members := *l.members.Load()
	for _, p := range members {
		_, port, _ := strings.Cut(p.addr, ":")
		ports[port] = true
	}
	cpu := func() time.Duration {
		var sum time.Duration
		for _, p := range members {
			c, err := procCPU(p.cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			sum += c
		}
		return sum
	}
	profiling := os.Getenv(benchProfileEnv) != ""
	signalAll := func(s os.Signal) {
		for _, p := range members {
			_ = p.cmd.Process.Signal(s)
		}
	}
	if profiling {
		signalAll(syscall.SIGUSR1)
	}
	tw0, cpu0, self0, machine0, pg0 := timeWaits(ports), cpu(), selfCPU(), machineCPU(), postgresCPU()
	began := time.Now()
	l.phase.Store(1)
	time.Sleep(window)
	l.phase.Store(2)
	r := loadResult{window: time.Since(began), memberCPU: cpu() - cpu0, loadCPU: selfCPU() - self0, machineCPU: machineCPU() - machine0}
	pg1 := postgresCPU()
	var pids []int
	for _, p := range members {
		pids = append(pids, p.cmd.Process.Pid)
	}
	backends, err := backendsOf(t.Context(), pids)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range backends {
		r.backendCPU += pg1[pid] - pg0[pid]
	}
	for k := range timeWaits(ports) {
		if !tw0[k] {
			r.newConns++
		}
	}
	if profiling {
		signalAll(syscall.SIGUSR2)
		time.Sleep(time.Second) // for the profiles to be written before the members are killed
	}
	l.halt()
	r.behind, r.catchUp = readModelCatchUp(t, members[0], l.acked.Load())
	for _, w := range l.workers {
		r.local = append(r.local, w.local...)
		r.forwarded = append(r.forwarded, w.forwarded...)
		r.failed += w.failed
		r.failures = append(r.failures, w.failures...)
	}
	slices.Sort(r.local)
	slices.Sort(r.forwarded)
	return r
}

// idleCPU returns the CPU time the member processes and their PostgreSQL
// backends use per second while no request comes: the heartbeats, the
// lease reads, and the read model's projection instances polling for
// events.
func idleCPU(t *testing.T, procs []*proc, d time.Duration) (members, backends time.Duration) {
	t.Helper()
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	cpu := func() (sum time.Duration) {
		for _, pid := range pids {
			c, err := procCPU(pid)
			if err != nil {
				t.Fatal(err)
			}
			sum += c
		}
		return sum
	}
	m0, pg0 := cpu(), postgresCPU()
	time.Sleep(d)
	m1, pg1 := cpu(), postgresCPU()
	bs, err := backendsOf(t.Context(), pids)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range bs {
		backends += pg1[pid] - pg0[pid]
	}
	return (m1 - m0) * time.Second / d, backends * time.Second / d
}

// readModelCatchUp returns how many of the acked one-cent deposits the
// balance read model (read through p) had not applied when called, and
// how long it took to apply them (at most a minute).
func readModelCatchUp(t *testing.T, p *proc, acked int64) (int64, time.Duration) {
	t.Helper()
	began := time.Now()
	var behind int64 = -1
	for {
		resp, err := plainClient.Get("http://" + p.addr + "/balances")
		if err != nil {
			t.Fatal(err)
		}
		var b map[string]int64
		err = json.NewDecoder(resp.Body).Decode(&b)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, v := range b {
			sum += v
		}
		if behind < 0 {
			behind = acked - sum
		}
		if sum >= acked || time.Since(began) > time.Minute {
			return behind, time.Since(began)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventsPerTx returns the mean number of events the journal of the store
// at dsn holds per inserting transaction (rows sharing an xmin): the
// journal fronts' writes per store call.
func eventsPerTx(t *testing.T, dsn string) float64 {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var n float64
	err = conn.QueryRow(t.Context(), `SELECT count(*)::float8 / greatest(1, count(DISTINCT xmin::text)) FROM `+
		pgx.Identifier{u.Query().Get("schema"), "event_journal"}.Sanitize()).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pct returns the p-th percentile (0 < p ≤ 1, nearest rank) of sorted.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// median returns the median of xs (the mean of the middle two of an even
// count).
func median[T int | int64 | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

// joinFloats formats xs for a table's list of runs.
func joinFloats(xs []float64, prec int) string {
	var out []string
	for _, x := range xs {
		out = append(out, strconv.FormatFloat(x, 'f', prec, 64))
	}
	return strings.Join(out, " ")
}

// TestClusterBenchThroughput measures deposits/s through the HTTP API of
// one, two and three member processes on one PostgreSQL schema (the
// default lease time), with clients spreading the requests over the
// members, and the CPU time the members spend per command; the
// configurations take turns in each round. A fourth configuration runs
// three members whose forwarding proxy keeps 64 idle connections per
// member instead of Go's default 2 (benchIdleEnv).
func TestClusterBenchThroughput(t *testing.T) {
	benchOn(t)
	runs, window := benchRuns(t), benchWindow(t, 10*time.Second)
	const accounts, workers, idle = 1000, 64, 10 * time.Second
	type config struct {
		name    string
		members int
		direct  bool
		idle    string
	}
	configs := []config{
		{"1 member", 1, false, ""},
		{"2 members", 2, false, ""},
		{"3 members", 3, false, ""},
		{"3 members, sent to owner", 3, true, ""},
		{"3 members, 64 idle conns", 3, false, "64"},
	}
	results := make([][]loadResult, len(configs))
	for round := range runs {
		for i, c := range configs {
			t.Run(fmt.Sprintf("%d/%s", round, c.name), func(t *testing.T) {
				if c.idle != "" {
					t.Setenv(benchIdleEnv, c.idle)
				}
				url := storeURL(t, "postgres")
				procs := startMembers(t, url, c.members, cluster.DefaultLeaseTime, 0)
				im, ib := idleCPU(t, procs, idle)
				l := newBenchLoad(accounts, workers, procs...)
				l.direct = c.direct
				r := l.measure(t, 3*time.Second, window)
				r.eventsPerTx = eventsPerTx(t, url)
				r.idleMembers, r.idleBackends = im, ib
				t.Logf("%s: %.0f commands/s, %d failed %q, CPU per command: members %v, their backends %v, machine %v; %d forwarded of %d, %d connections closed by clients; read model %d behind, caught up in %v",
					c.name, r.perSec(), r.failed, r.failures, r.cpuPerCommand(), r.perCommand(r.backendCPU), r.perCommand(r.machineCPU), len(r.forwarded), r.ok(), r.newConns, r.behind, r.catchUp)
				results[i] = append(results[i], r)
			})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\ndeposits through the HTTP API, %d clients over %d accounts spread over the members, one PostgreSQL, lease %v; medians of %d runs of %v (configurations alternated)\n",
		workers, accounts, cluster.DefaultLeaseTime, runs, window)
	fmt.Fprintf(&b, "%-26s %8s %6s  %-36s %-9s %-22s %-22s\n", "", "cmd/s", "ratio", "runs (cmd/s)", "forwarded", "local p50 / p99 ms", "forwarded p50 / p99 ms")
	var base []float64
	type costs struct{ member, backend, load, machine, behind, catchUp, conns, perTx, idleM, idleB []float64 }
	cs := make([]costs, len(configs))
	for i, c := range configs {
		var rate, fwd []float64
		var lp50, lp99, fp50, fp99 []time.Duration
		for _, r := range results[i] {
			rate = append(rate, r.perSec())
			fwd = append(fwd, float64(len(r.forwarded))/float64(max(1, r.ok())))
			lp50, lp99 = append(lp50, pct(r.local, .5)), append(lp99, pct(r.local, .99))
			fp50, fp99 = append(fp50, pct(r.forwarded, .5)), append(fp99, pct(r.forwarded, .99))
			us := func(d time.Duration) float64 { return float64(r.perCommand(d)) / 1e3 }
			cs[i].member = append(cs[i].member, us(r.memberCPU))
			cs[i].backend = append(cs[i].backend, us(r.backendCPU))
			cs[i].load = append(cs[i].load, us(r.loadCPU))
			cs[i].machine = append(cs[i].machine, us(r.machineCPU))
			cs[i].behind = append(cs[i].behind, float64(r.behind))
			cs[i].catchUp = append(cs[i].catchUp, r.catchUp.Seconds())
			cs[i].conns = append(cs[i].conns, float64(r.newConns)/float64(max(1, len(r.forwarded))))
			cs[i].perTx = append(cs[i].perTx, r.eventsPerTx)
			cs[i].idleM = append(cs[i].idleM, float64(r.idleMembers)/1e6)
			cs[i].idleB = append(cs[i].idleB, float64(r.idleBackends)/1e6)
		}
		if i == 0 {
			base = rate
		}
		// The ratio to one member is taken round by round (the machine's
		// speed drifts between rounds), then its median.
		var ratio []float64
		for j := range min(len(rate), len(base)) {
			ratio = append(ratio, rate[j]/base[j])
		}
		fmt.Fprintf(&b, "%-26s %8.0f %5.0f%%  %-36s %8.0f%%  %8s / %-11s %8s / %-11s\n",
			c.name, median(rate), 100*median(ratio), joinFloats(rate, 0), 100*median(fwd),
			ms(median(lp50)), ms(median(lp99)), ms(median(fp50)), ms(median(fp99)))
	}
	fmt.Fprintf(&b, "\nCPU time per command answered, µs (medians; the runs in brackets)\n")
	fmt.Fprintf(&b, "%-26s %-28s %-28s %-16s %-28s %s\n", "", "member processes", "their PostgreSQL backends", "load generator", "whole machine (all users)", "events per journal transaction")
	for i, c := range configs {
		col := func(xs []float64) string { return fmt.Sprintf("%.0f [%s]", median(xs), joinFloats(xs, 0)) }
		fmt.Fprintf(&b, "%-26s %-28s %-28s %-16s %-28s %.1f [%s]\n", c.name, col(cs[i].member), col(cs[i].backend), fmt.Sprintf("%.0f", median(cs[i].load)), col(cs[i].machine), median(cs[i].perTx), joinFloats(cs[i].perTx, 1))
	}
	fmt.Fprintf(&b, "\nread model (4 projection instances) behind when the load stopped, events [runs], and its catch-up s [runs]; forwarding connections closed per forwarded command [runs]\n")
	for i, c := range configs {
		fmt.Fprintf(&b, "%-26s behind %-26s catch-up %-24s conns/fwd %s\n", c.name, joinFloats(cs[i].behind, 0), joinFloats(cs[i].catchUp, 1), joinFloats(cs[i].conns, 2))
	}
	fmt.Fprintf(&b, "\nidle (%v before the load): CPU ms per second per member, of the member processes [runs] and of their PostgreSQL backends [runs] (10 ms ticks)\n", idle)
	for i, c := range configs {
		perMember := func(xs []float64) []float64 {
			out := make([]float64, len(xs))
			for j, x := range xs {
				out[j] = x / float64(c.members)
			}
			return out
		}
		fmt.Fprintf(&b, "%-26s members %-30s backends %s\n", c.name, joinFloats(perMember(cs[i].idleM), 1), joinFloats(perMember(cs[i].idleB), 1))
	}
	fmt.Fprintf(&b, "CPU: user+system time from /proc/PID/stat (members, backends found through pg_stat_activity.client_port) and /proc/stat (machine), over the measured window\n")
	t.Log(b.String())
}

// TestClusterBenchProxyLatency measures, under one moderate load of three
// member processes (8 clients, the load of the failure tests), the
// latency of deposits the member they reached served itself beside those
// it forwarded to the owner (one hop), in the same windows.
func TestClusterBenchProxyLatency(t *testing.T) {
	benchOn(t)
	runs, window := benchRuns(t), benchWindow(t, 10*time.Second)
	const accounts = 1000
	loads := []int{1, 8}
	results := make([][]loadResult, len(loads))
	for round := range runs {
		t.Run(strconv.Itoa(round), func(t *testing.T) {
			url := storeURL(t, "postgres")
			procs := startMembers(t, url, 3, cluster.DefaultLeaseTime, 0)
			for i, workers := range loads {
				l := newBenchLoad(accounts, workers, procs...)
				r := l.measure(t, 3*time.Second, window)
				if r.failed > 0 {
					t.Errorf("%d failed: %q", r.failed, r.failures)
				}
				results[i] = append(results[i], r)
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nlatency of a deposit, 3 members, served where it arrived vs forwarded one hop, same windows; medians of %d runs of %v\n", runs, window)
	fmt.Fprintf(&b, "%-10s %8s  %-22s %-22s %-16s %-16s\n", "clients", "cmd/s", "local p50 / p99 ms", "forwarded p50 / p99", "added p50 ms", "added p99 ms")
	for i, workers := range loads {
		var rate []float64
		var lp50, lp99, fp50, fp99, d50, d99 []time.Duration
		for _, r := range results[i] {
			rate = append(rate, r.perSec())
			lp50, lp99 = append(lp50, pct(r.local, .5)), append(lp99, pct(r.local, .99))
			fp50, fp99 = append(fp50, pct(r.forwarded, .5)), append(fp99, pct(r.forwarded, .99))
			d50 = append(d50, pct(r.forwarded, .5)-pct(r.local, .5))
			d99 = append(d99, pct(r.forwarded, .99)-pct(r.local, .99))
		}
		var d50s, d99s []float64
		for j := range d50 {
			d50s, d99s = append(d50s, float64(d50[j])/1e6), append(d99s, float64(d99[j])/1e6)
		}
		fmt.Fprintf(&b, "%-10d %8.0f  %8s / %-11s %8s / %-11s %-16s %-16s\n", workers, median(rate),
			ms(median(lp50)), ms(median(lp99)), ms(median(fp50)), ms(median(fp99)),
			ms(median(d50))+" ["+joinFloats(d50s, 2)+"]", ms(median(d99))+" ["+joinFloats(d99s, 2)+"]")
	}
	t.Log(b.String())
}

// countingStore counts the calls a member makes to its membership store,
// the rows they return, and the time they take.
type countingStore struct {
	s     membership.Store
	calls [7]atomic.Int64
	rows  [7]atomic.Int64
	busy  [7]atomic.Int64
}

var storeOps = [7]string{"Join", "Heartbeat", "Leave", "Acquire", "Release", "Members", "Leases"}

func (c *countingStore) count(op int, rows int, since time.Time) {
	c.calls[op].Add(1)
	c.rows[op].Add(int64(rows))
	c.busy[op].Add(int64(time.Since(since)))
}

// snapshot returns the counts so far.
func (c *countingStore) snapshot() (calls, rows, busy [7]int64) {
	for i := range c.calls {
		calls[i], rows[i], busy[i] = c.calls[i].Load(), c.rows[i].Load(), c.busy[i].Load()
	}
	return
}

func (c *countingStore) Join(ctx context.Context, cl string, m membership.Member, ttl time.Duration) error {
	defer c.count(0, 0, time.Now())
	return c.s.Join(ctx, cl, m, ttl)
}

func (c *countingStore) Heartbeat(ctx context.Context, cl string, m membership.Holder, ttl time.Duration) ([]membership.Lease, error) {
	t0 := time.Now()
	ls, err := c.s.Heartbeat(ctx, cl, m, ttl)
	c.count(1, len(ls), t0)
	return ls, err
}

func (c *countingStore) Leave(ctx context.Context, cl string, m membership.Holder) error {
	defer c.count(2, 0, time.Now())
	return c.s.Leave(ctx, cl, m)
}

func (c *countingStore) Acquire(ctx context.Context, cl, lease string, m membership.Holder, ttl time.Duration) (membership.Lease, error) {
	defer c.count(3, 1, time.Now())
	return c.s.Acquire(ctx, cl, lease, m, ttl)
}

func (c *countingStore) Release(ctx context.Context, cl, lease string, m membership.Holder) error {
	defer c.count(4, 0, time.Now())
	return c.s.Release(ctx, cl, lease, m)
}

func (c *countingStore) Members(ctx context.Context, cl string) ([]membership.Member, error) {
	t0 := time.Now()
	ms, err := c.s.Members(ctx, cl)
	c.count(5, len(ms), t0)
	return ms, err
}

func (c *countingStore) Leases(ctx context.Context, cl string) ([]membership.Lease, error) {
	t0 := time.Now()
	ls, err := c.s.Leases(ctx, cl)
	c.count(6, len(ls), t0)
	return ls, err
}

// TestClusterBenchLeaseTraffic counts the calls each member makes to the
// PostgreSQL store's membership.Store (a counting wrapper around it, in
// this process): three members of a cluster of 32 ranges (no shards, so
// nothing but the membership runs), at the default lease time and at the
// failure tests' 4 s, the two clusters side by side: the calls from the
// first Join until each member holds its share, then per member per
// minute in the steady state.
func TestClusterBenchLeaseTraffic(t *testing.T) {
	benchOn(t)
	window := benchWindow(t, time.Minute)
	const members = 3
	leases := []time.Duration{cluster.DefaultLeaseTime, leaseTime}
	type result struct {
		setup                       time.Duration
		setupCalls                  [7]int64
		calls, rows, busy           [7]int64 // the steady window, all members
		heartbeatsPerMemberAndRound float64
	}
	results := make([]result, len(leases))
	var wg sync.WaitGroup
	for i, lease := range leases {
		url := storeURL(t, "postgres")
		wg.Go(func() {
			ctx := context.Background()
			s, err := postgres.Open(ctx, url)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			var stores []*countingStore
			var mems []*cluster.Member
			began := time.Now()
			for j := range members {
				cs := &countingStore{s: s.Membership()}
				m, err := cluster.Join(ctx, cluster.Config{Store: cs, Cluster: "bench", Name: string(rune('a' + j)), Address: "127.0.0.1:1", LeaseTime: lease})
				if err != nil {
					t.Error(err)
					return
				}
				stores, mems = append(stores, cs), append(mems, m)
			}
			defer func() {
				for _, m := range mems {
					_ = m.Leave(ctx)
				}
			}()
			for {
				// Each at its share (the members by name, the first
				// 32 mod 3 one more), so that no hand-off is left.
				even := true
				for j, m := range mems {
					share := cluster.DefaultRanges / members
					if j < cluster.DefaultRanges%members {
						share++
					}
					even = even && len(m.Held()) == share
				}
				if even {
					break
				}
				if time.Since(began) > 30*lease {
					t.Errorf("lease %v: the members did not spread the ranges within %v", lease, 30*lease)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			var r result
			r.setup = time.Since(began)
			sum := func() (calls, rows, busy [7]int64) {
				for _, cs := range stores {
					c, rw, b := cs.snapshot()
					for k := range c {
						calls[k] += c[k]
						rows[k] += rw[k]
						busy[k] += b[k]
					}
				}
				return
			}
			r.setupCalls, _, _ = sum()
			c0, r0, b0 := sum()
			time.Sleep(window)
			c1, r1, b1 := sum()
			for k := range c1 {
				r.calls[k], r.rows[k], r.busy[k] = c1[k]-c0[k], r1[k]-r0[k], b1[k]-b0[k]
			}
			results[i] = r
		})
	}
	wg.Wait()
	var b strings.Builder
	fmt.Fprintf(&b, "\nmembership store calls, PostgreSQL, %d members, %d ranges; counted by a wrapper around membership.Store\n", members, cluster.DefaultRanges)
	for i, lease := range leases {
		r := results[i]
		perMin := func(x int64) float64 { return float64(x) / members / window.Minutes() }
		fmt.Fprintf(&b, "lease %v (heartbeat %v): %d members spread the ranges in %v with %d calls (", lease, lease/5, members, r.setup.Round(10*time.Millisecond), total(r.setupCalls))
		var parts []string
		for k, op := range storeOps {
			if r.setupCalls[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", op, r.setupCalls[k]))
			}
		}
		fmt.Fprintf(&b, "%s)\n", strings.Join(parts, ", "))
		fmt.Fprintf(&b, "  steady state, per member per minute over %v:", window)
		var all float64
		for k, op := range storeOps {
			if r.calls[k] > 0 {
				fmt.Fprintf(&b, " %s %.1f (rows %.0f, mean %s ms);", op, perMin(r.calls[k]), perMin(r.rows[k]), ms(time.Duration(r.busy[k]/r.calls[k])))
				all += perMin(r.calls[k])
			}
		}
		fmt.Fprintf(&b, " total %.1f calls, %.0f rows\n", all, perMin(total(r.rows)))
	}
	t.Log(b.String())
}

func total(xs [7]int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// TestClusterBenchTakeOver kills (SIGKILL) one of three member processes
// under load (8 clients) and measures the time from the kill until the two
// others hold every range between them (polled every 20 ms), at the
// default lease time and at the failure tests' 4 s, the two taking turns;
// with ANNALS_CLUSTER_BENCH_STORE=kafka, on the Kafka journal's consumer
// group, every partition, at the default session timeout and the tests' 6 s.
// The members join, and the kill comes, at random moments of a heartbeat
// cycle, so that the runs sample the phases of the members' rounds.
func TestClusterBenchTakeOver(t *testing.T) {
	benchOn(t)
	runs := benchRuns(t)
	// ANNALS_CLUSTER_BENCH_STORE=kafka measures the Kafka journal's
	// consumer group (its lease is the group's session timeout).
	kind := cmp.Or(os.Getenv("ANNALS_CLUSTER_BENCH_STORE"), "postgres")
	leases := []time.Duration{cluster.DefaultLeaseTime, leaseTime}
	if kind == "kafka" {
		leases = []time.Duration{kafkacluster.DefaultSessionTimeout, kafkaSession}
	}
	type result struct {
		first, all, slowest time.Duration
		failed, unavailable int
		failures            []string
	}
	results := make([][]result, len(leases))
	client := &http.Client{Timeout: 10 * time.Second}
	// held returns the entity units (slice ranges or partitions) p holds,
	// and how many there are in all (the daemon instances' leases move
	// too, but are not counted).
	held := func(p *proc) ([]string, int, error) {
		resp, err := client.Get("http://" + p.addr + "/cluster")
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		var s memberStatus
		err = json.NewDecoder(resp.Body).Decode(&s)
		return s.Units, s.All, err
	}
	for round := range runs {
		for i, lease := range leases {
			t.Run(fmt.Sprintf("%d/lease=%v", round, lease), func(t *testing.T) {
				url := storeURL(t, kind)
				procs := startMembers(t, url, 3, lease, lease/5)
				survivors, victim := procs[:2], procs[2]
				before := map[string]bool{}
				for _, p := range survivors {
					hs, _, err := held(p)
					if err != nil {
						t.Fatal(err)
					}
					for _, h := range hs {
						before[h] = true
					}
				}
				l := newBenchLoad(50, 8, procs...)
				l.phase.Store(1) // every answer counts
				l.run()
				// At a random moment of the members' heartbeat cycles: their
				// rounds keep the phases their joins gave them.
				time.Sleep(2*time.Second + rand.N(lease/5))
				l.members.Store(&survivors) // the balancer's health check takes the victim out
				killed := time.Now()
				if err := victim.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				var r result
				for r.all == 0 {
					if time.Since(killed) > 3*lease+10*time.Second {
						t.Fatalf("the survivors did not take every range within %v", 3*lease+10*time.Second)
					}
					now, dup, ok, units := map[string]bool{}, false, true, 0
					for _, p := range survivors {
						hs, all, err := held(p)
						ok, units = ok && err == nil, all
						for _, h := range hs {
							dup = dup || now[h]
							now[h] = true
						}
					}
					took := time.Since(killed)
					if ok && r.first == 0 && len(now) > len(before) {
						r.first = took
					}
					if ok && !dup && units > 0 && len(now) == units {
						r.all = took
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(time.Second)
				l.halt()
				for _, w := range l.workers {
					r.slowest = max(r.slowest, w.slowest)
					r.failed += w.failed
					r.unavailable += w.unavailable
					r.failures = append(r.failures, w.failures...)
				}
				t.Logf("lease %v: first range taken %v, all %v after SIGKILL; slowest deposit %v; %d failed %q", lease, r.first, r.all, r.slowest, r.failed, r.failures)
				results[i] = append(results[i], r)
			})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\ntake-over after SIGKILL of one of three members on %s under load (8 clients): from the kill until the survivors hold every unit; %d runs each, alternated\n", kind, runs)
	fmt.Fprintf(&b, "%-22s %-10s %-10s %-10s %-14s\n", "lease (heartbeat)", "median s", "max s", "min s", "first range s (median)")
	for i, lease := range leases {
		var all, first []time.Duration
		var alls []float64
		if len(results[i]) == 0 {
			continue
		}
		for _, r := range results[i] {
			all, first = append(all, r.all), append(first, r.first)
			alls = append(alls, r.all.Seconds())
		}
		var slows, failed, unavailable []float64
		for _, r := range results[i] {
			slows, failed, unavailable = append(slows, r.slowest.Seconds()), append(failed, float64(r.failed)), append(unavailable, float64(r.unavailable))
		}
		fmt.Fprintf(&b, "%-22s %-10.2f %-10.2f %-10.2f %-14.2f\n", fmt.Sprintf("%v (%v)", lease, lease/5),
			median(all).Seconds(), slices.Max(all).Seconds(), slices.Min(all).Seconds(), median(first).Seconds())
		fmt.Fprintf(&b, "    runs s [%s]; slowest deposit s [%s]; failed deposits [%s], of which MoveWait passed [%s]\n",
			joinFloats(alls, 2), joinFloats(slows, 2), joinFloats(failed, 0), joinFloats(unavailable, 0))
	}
	t.Log(b.String())
}

// BenchmarkForwardHop measures the forwarding hop alone, in one process:
// two members on the memory store (no disk, no database), each serving the
// service's own routes (routes, the bank accounts on an entity.Host) on a
// loopback HTTP server, and 64 clients at once sending deposits to member
// a, for accounts a owns (local, the baseline) or that b owns (forwarded,
// one hop). cpu-µs/op is this process's CPU time per deposit (clients,
// both members); conns/op the connections member b accepted per deposit
// (the forwarding proxy's dials). forwarded-idle-64 runs with
// http.DefaultTransport, which the proxy uses when HandlerConfig.Transport
// is nil, keeping 64 idle connections per member instead of Go's default 2.
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench ForwardHop -benchtime 20000x ./examples/cluster/; done
func BenchmarkForwardHop(b *testing.B) {
	for _, c := range []struct {
		name    string
		forward bool
		idle    int
	}{{"local", false, 0}, {"forwarded", true, 0}, {"forwarded-idle-64", true, 64}} {
		b.Run(c.name, func(b *testing.B) {
			if c.idle > 0 {
				dt := http.DefaultTransport.(*http.Transport)
				old := dt.MaxIdleConnsPerHost
				dt.MaxIdleConnsPerHost = c.idle
				defer func() { dt.MaxIdleConnsPerHost = old }()
			}
			st := memory.New()
			reg := serialization.NewRegistry()
			if err := bank.Register(reg); err != nil {
				b.Fatal(err)
			}
			var accepted atomic.Int64
			members := map[string]*cluster.Member{}
			servers := map[string]*httptest.Server{}
			for _, name := range []string{"a", "b"} {
				host, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: st.Journal(), Snapshots: st.Snapshots(), Registry: reg, Assigned: true})
				if err != nil {
					b.Fatal(err)
				}
				srv := httptest.NewUnstartedServer(nil)
				if name == "b" {
					srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
						if s == http.StateNew {
							accepted.Add(1)
						}
					}
				}
				m, err := cluster.Join(b.Context(), cluster.Config{Store: st.Membership(), Cluster: "bench", Name: name, Address: srv.Listener.Addr().String(),
					LeaseTime: 2 * time.Second, Shards: []cluster.Shard{host}, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				srv.Config.Handler = routes(leaseMember{m}, host, nil)
				srv.Start()
				members[name], servers[name] = m, srv
				defer func() {
					_ = m.Leave(context.Background())
					srv.Close()
					_ = host.Shutdown(context.Background())
				}()
			}
			for began := time.Now(); len(members["a"].Held()) != cluster.DefaultRanges/2 || len(members["b"].Held()) != cluster.DefaultRanges/2; {
				if time.Since(began) > 30*time.Second {
					b.Fatalf("the members did not share the ranges: %v, %v", members["a"], members["b"])
				}
				time.Sleep(10 * time.Millisecond)
			}
			var ids []string
			for began := time.Now(); ; {
				ids = ids[:0]
				known := 0
				for i := range 2000 {
					id := accountID(i)
					if o, ok := members["a"].OwnerOf(annals.PersistenceID(bank.EntityType, id)); ok {
						known++
						if o.Local != c.forward {
							ids = append(ids, id)
						}
					}
				}
				if known == 2000 { // a has read b's leases
					break
				}
				if time.Since(began) > 30*time.Second {
					b.Fatalf("member a knows the owners of %d of 2000 accounts", known)
				}
				time.Sleep(10 * time.Millisecond)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}
			defer client.CloseIdleConnections()
			target := servers["a"].URL
			var failed atomic.Int64
			deposit := func(id string) {
				resp, err := client.Post(target+"/accounts/"+id+"/deposit?amount=1", "text/plain", nil)
				if err != nil {
					failed.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
			for _, id := range ids { // recover every account first
				deposit(id)
			}
			accepted.Store(0)
			b.SetParallelism(32) // 64 clients on 2 cores
			b.ReportAllocs()
			cpu0 := selfCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					deposit(ids[rand.IntN(len(ids))])
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(selfCPU()-cpu0)/1e3/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(accepted.Load())/float64(b.N), "conns/op")
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d deposits failed", n)
			}
		})
	}
}
