package cassandra_test

// Annals beside Pekko Persistence Cassandra 1.1 on the same node and
// keyspace, doing the same work, in alternating rounds:
//
//	go test -run '^$' -bench BesidePekko -benchtime 1x -count 3 ./store/cassandra/
//
// Each round runs the Pekko program in testdata/pekko (a new JVM, timed
// inside it) and Annals (a new store, timed here), the order switching
// from round to round. Both sides start the same way before their timing:
// a new process (a JVM, a store), then a recovery of an empty id, which
// connects the session and prepares the statements. The benchmark skips
// when Java, Maven or the node are missing, and fails instead when
// ANNALS_TEST_REQUIRE lists cassandra.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

const (
	// besidePekkoRounds is the number of alternating rounds per run.
	besidePekkoRounds = 3
	// writeIDs entities persist writeEvents events each, all at once,
	// each event after the previous one's reply; each round does it
	// twice (cold, then warm) on new ids.
	writeIDs, writeEvents = 1000, 10
	// recoverEvents is the size of the recovered id; each round recovers
	// it recoverTimes times, one after another.
	recoverEvents, recoverTimes = 10_000, 5
)

// tallyCmd is a command of the Annals twin of the Pekko program's Tally
// entity: add persists Added{add}; an empty add asks for the count.
type tallyCmd struct {
	add   string
	reply entity.ReplyTo[int64]
}

// tally is the Annals twin of testdata/pekko's Tally: the same events
// (Added, jackson-json's form), a state that only counts them.
func tally(tags []string) entity.Behavior[tallyCmd, Added, int64] {
	return entity.Behavior[tallyCmd, Added, int64]{
		EntityType: "Tally",
		Command: func(n int64, c tallyCmd) entity.ReplyEffect[Added, int64] {
			var fx entity.Effects[Added, int64]
			reply := func(n int64) { c.reply.Send(n) }
			if c.add == "" {
				return fx.Reply(reply)
			}
			return fx.Persist(Added{Item: c.add}).ThenReply(reply)
		},
		Event:  func(n int64, _ Added) int64 { return n + 1 },
		Tagger: func(Added) []string { return tags },
	}
}

// besidePekko is what the benchmark's rounds share.
type besidePekko struct {
	run     func(args ...string) []string // the Pekko program
	url, ks string
	reg     *serialization.Registry
}

// store opens a new store on the benchmark's keyspace, closed when b ends;
// rows, when not nil, counts the rows read from messages.
func (bp *besidePekko) store(b *testing.B, rows *atomic.Int64) *cassandra.Store {
	b.Helper()
	// The keyspace's guard, claims (checked by BenchmarkBesidePekko): the
	// conditional guard's figures are in docs/performance.md.
	var opts []cassandra.Option
	if rows != nil {
		opts = append(opts, cassandra.WithQueryObserver(rowCounter{rows}))
	}
	s, err := cassandra.Open(b.Context(), bp.url, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// host returns an entity host of tally(tags) on s, and recovers the empty
// id warmup through it (untimed, as the Pekko program's warm-up).
func (bp *besidePekko) host(b *testing.B, s *cassandra.Store, tags []string, warmup string) *entity.Host[tallyCmd, Added, int64] {
	b.Helper()
	h, err := entity.NewHost(tally(tags), entity.HostConfig{Journal: s.Journal(), Registry: bp.reg})
	if err != nil {
		b.Fatal(err)
	}
	if warmup != "" {
		if _, err := entity.Ask(b.Context(), h, warmup, func(r entity.ReplyTo[int64]) tallyCmd { return tallyCmd{reply: r} }); err != nil {
			b.Fatal(err)
		}
	}
	return h
}

func shutdown(b *testing.B, h *entity.Host[tallyCmd, Added, int64]) {
	b.Helper()
	if err := h.Shutdown(b.Context()); err != nil {
		b.Fatal(err)
	}
}

// pekkoTimes parses the lines "KEY MS …" of the Pekko program.
func pekkoTimes(b *testing.B, lines []string, key string) []time.Duration {
	b.Helper()
	var out []time.Duration
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != key {
			continue
		}
		ms, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			b.Fatalf("pekko line %q: %v", l, err)
		}
		out = append(out, time.Duration(ms*float64(time.Millisecond)))
	}
	if len(out) == 0 {
		b.Fatalf("pekko printed no %q line: %q", key, lines)
	}
	return out
}

// rowCounter counts the rows the driver returns for reads of messages'
// events (replays and tag repairs).
type rowCounter struct{ n *atomic.Int64 }

func (c rowCounter) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if strings.HasPrefix(q.Statement, "SELECT sequence_nr, timestamp, writer_uuid") && strings.Contains(q.Statement, ".messages") {
		c.n.Add(int64(q.Rows))
	}
}

func median[T int64 | float64 | time.Duration](v []T) T {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// rounds runs pekko and annals round after round, alternating which goes
// first, and reports the medians of each side's times and of the per-round
// ratios Pekko time / Annals time (Annals' speed relative to Pekko's, >1
// when Annals is faster) as name-annals-ms, name-pekko-ms and
// name-annals/pekko, for each name the two return.
func rounds(b *testing.B, pekko, annals func(round int) map[string]time.Duration) {
	times := map[string][2][]time.Duration{}
	ratios := map[string][]float64{}
	for round := range besidePekkoRounds {
		var p, a map[string]time.Duration
		if round%2 == 0 {
			p, a = pekko(round), annals(round)
		} else {
			a, p = annals(round), pekko(round)
		}
		for _, name := range slices.Sorted(maps.Keys(p)) {
			pt := p[name]
			at, ok := a[name]
			if !ok {
				b.Fatalf("no Annals time for %s", name)
			}
			t := times[name]
			t[0], t[1] = append(t[0], at), append(t[1], pt)
			times[name] = t
			ratios[name] = append(ratios[name], pt.Seconds()/at.Seconds())
			b.Logf("round %d %s: Annals %v, Pekko %v, Annals/Pekko %.2f×", round, name, at, pt, pt.Seconds()/at.Seconds())
		}
	}
	for name, t := range times {
		b.ReportMetric(float64(median(t[0]).Microseconds())/1000, name+"-annals-ms")
		b.ReportMetric(float64(median(t[1]).Microseconds())/1000, name+"-pekko-ms")
		b.ReportMetric(median(ratios[name]), name+"-annals/pekko")
	}
}

// BenchmarkBesidePekko compares Annals with Pekko Persistence Cassandra
// 1.1, both through their entity APIs (Pekko's EventSourcedBehavior,
// Annals' entity host), on the same node and keyspace:
//
//   - write/tags=0, write/tags=1: 1,000 new entities at once, each
//     persisting 10 events one after another, without and with one tag;
//     twice in each round's new process, on new ids: "cold" times the
//     first pass (a JVM still compiling), "warm" the second. Annals
//     guards each write against a second writer (a Paxos round); Pekko
//     does not. A Pekko persist returns before its tag_views row is
//     written; an Annals write after it.
//   - recover/scanned, recover/unscanned: one id of 10,000 events (one
//     tag each, written by Annals), recovered five times one after
//     another in each round's new process; "first" times the first,
//     "warm" the median of the other four. With scanned, the id's tag_scanning
//     mark is at its highest number (its writer closed); with unscanned it
//     has none (its writer crashed before its scanning flush), so both
//     sides check every event's tags. rows/first-recovery counts the
//     messages rows Annals read in its first recovery.
func BenchmarkBesidePekko(b *testing.B) {
	// The driver's request timeout is the store's (with Pekko's default,
	// 2 s, requests of 1,000 new entities at once time out on a loaded
	// node and the entities stop).
	run := pekkoWith(b, 10*time.Minute, "-Xmx1g", "-Ddatastax-java-driver.basic.request.timeout=10s")
	s := cassandratest.Open(b)
	if g := s.WriteGuard(); g != cassandra.GuardClaims {
		b.Fatalf("a new keyspace's write guard: %v, want claims", g)
	}
	bp := &besidePekko{
		run: run,
		url: "cassandra://" + cassandratest.Address() + "/" + s.Keyspace(),
		ks:  s.Keyspace(),
		reg: serialization.NewRegistry(),
	}
	if err := serialization.RegisterJSON[Added](bp.reg, "annals.interop.Added"); err != nil {
		b.Fatal(err)
	}
	for _, tags := range [][]string{nil, {"bench"}} {
		b.Run(fmt.Sprintf("write/tags=%d", len(tags)), func(b *testing.B) {
			rounds(b, func(round int) map[string]time.Duration {
				prefix := fmt.Sprintf("Tally|p%d-%d", len(tags), round)
				lines := bp.run("bench-write", bp.ks, prefix, strconv.Itoa(writeIDs), strconv.Itoa(writeEvents), strings.Join(tags, ","), "2")
				ts := pekkoTimes(b, lines, "write-ms")
				return map[string]time.Duration{"cold": ts[0], "warm": ts[1]}
			}, func(round int) map[string]time.Duration {
				prefix := fmt.Sprintf("a%d-%d", len(tags), round)
				h := bp.host(b, bp.store(b, nil), tags, prefix+"-warmup")
				defer shutdown(b, h)
				var ts []time.Duration
				for pass := range 2 {
					start := time.Now()
					var wg sync.WaitGroup
					for i := range writeIDs {
						id := fmt.Sprintf("%s-%d-%d", prefix, pass, i)
						wg.Go(func() {
							for j := range writeEvents {
								if _, err := entity.Ask(b.Context(), h, id, func(r entity.ReplyTo[int64]) tallyCmd {
									return tallyCmd{add: fmt.Sprintf("i%d", j), reply: r}
								}); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					ts = append(ts, time.Since(start))
				}
				return map[string]time.Duration{"cold": ts[0], "warm": ts[1]}
			})
		})
	}

	const pid = "Tally|recover"
	for from := int64(1); from <= recoverEvents; from += 500 {
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := from; seq < from+500; seq++ {
			payload, id, manifest, err := bp.reg.Serialize(Added{Item: fmt.Sprintf("i%d", seq)})
			if err != nil {
				b.Fatal(err)
			}
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: payload,
				SerializerID: id, Manifest: manifest, WriterID: "w", Tags: []string{"bench"}})
		}
		mustWriteAll(b, s.Journal(), w)
	}
	for _, scanned := range []bool{true, false} {
		name := map[bool]string{true: "recover/scanned", false: "recover/unscanned"}[scanned]
		// mark sets the id's tag_scanning mark as the variant has it.
		mark := func() {
			q := s.Session().Query(`INSERT INTO `+s.Keyspace()+`.tag_scanning (persistence_id, sequence_nr) VALUES (?, ?)`, pid, recoverEvents)
			if !scanned {
				q = s.Session().Query(`DELETE FROM `+s.Keyspace()+`.tag_scanning WHERE persistence_id = ?`, pid)
			}
			if err := q.WithContext(b.Context()).Exec(); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name, func(b *testing.B) {
			var rows []float64
			rounds(b, func(int) map[string]time.Duration {
				mark()
				ts := pekkoTimes(b, bp.run("bench-recover", bp.ks, pid, strconv.Itoa(recoverTimes)), "recover-ms")
				return map[string]time.Duration{"first": ts[0], "warm": median(ts[1:])}
			}, func(round int) map[string]time.Duration {
				mark()
				var read atomic.Int64
				st := bp.store(b, &read)
				shutdown(b, bp.host(b, st, nil, fmt.Sprintf("recover-warmup-%d", round)))
				var ts []time.Duration
				for i := range recoverTimes {
					h := bp.host(b, st, nil, "")
					before := read.Load()
					start := time.Now()
					n, err := entity.Ask(b.Context(), h, "recover", func(r entity.ReplyTo[int64]) tallyCmd { return tallyCmd{reply: r} })
					ts = append(ts, time.Since(start))
					if err != nil || n != recoverEvents {
						b.Fatalf("recovered %d events, %v; want %d", n, err, recoverEvents)
					}
					if i == 0 {
						rows = append(rows, float64(read.Load()-before))
					}
					shutdown(b, h)
				}
				return map[string]time.Duration{"first": ts[0], "warm": median(ts[1:])}
			})
			b.ReportMetric(median(rows), "rows/first-recovery")
		})
	}
}
