package cassandra_test

// Benchmarks of the Cassandra store, each beside a baseline that does the
// same work with the driver directly, in the same run, on the same node:
//
//	scripts/bench cassandra
//	go test -run '^$' -bench . -benchtime 1x ./store/cassandra/
//
// Every benchmark works in a keyspace of its own, dropped when it ends,
// and skips when no node answers.

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/engine/enginetest"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

var benchPayload = make([]byte, 100)

func benchEvent(pid string, seq int64, tags []string) journal.Repr {
	return journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: benchPayload, SerializerID: 4, Manifest: "m", WriterID: "w", Tags: tags}
}

// rawWriter does an Annals write's work with the driver: the messages
// insert (in a logged batch; with lwt, the conditional batch of the
// static guard that Annals sends), then, for a tagged event, its tag_views
// row and tag_write_progress, as single statements. With verify (no lwt),
// each batch is followed by a quorum read of the partition's static
// column: what a write under a claim would cost (see "Designs that keep
// the guard" in docs/performance.md).
type rawWriter struct {
	s                       *cassandra.Store
	lwt, verify             bool
	insert, guard, guardNew string
	tagRow, progrs, static  string
}

func newRawWriter(s *cassandra.Store, lwt bool) *rawWriter {
	ks := s.Keyspace()
	return &rawWriter{s: s, lwt: lwt,
		insert:   `INSERT INTO ` + ks + `.messages (persistence_id, partition_nr, sequence_nr, timestamp, timebucket, writer_uuid, ser_id, ser_manifest, event_manifest, event, tags) VALUES (?, 0, ?, ?, ?, 'w', 4, 'm', '', ?, ?)`,
		guard:    `UPDATE ` + ks + `.messages SET annals_highest = ? WHERE persistence_id = ? AND partition_nr = 0 IF annals_highest = ?`,
		guardNew: `UPDATE ` + ks + `.messages SET annals_highest = ? WHERE persistence_id = ? AND partition_nr = 0 IF annals_highest = null`,
		tagRow:   `INSERT INTO ` + ks + `.tag_views (tag_name, timebucket, timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr, writer_uuid, ser_id, ser_manifest, event_manifest, event) VALUES (?, ?, ?, ?, ?, ?, 'w', 4, 'm', '', ?)`,
		progrs:   `INSERT INTO ` + ks + `.tag_write_progress (persistence_id, tag, sequence_nr, tag_pid_sequence_nr, offset) VALUES (?, ?, ?, ?, ?)`,
		static:   `SELECT annals_highest FROM ` + ks + `.messages WHERE persistence_id = ? AND partition_nr = 0 LIMIT 1`,
	}
}

// write stores event seq of pid; first says it is the pid's first write.
func (r *rawWriter) write(b *testing.B, pid string, seq int64, first bool, tags []string) {
	now := time.Now()
	u := gocql.UUIDFromTime(now)
	bucket := r.s.BucketSize().Key(now)
	batch := r.s.Session().Batch(gocql.LoggedBatch).WithContext(b.Context())
	if r.lwt {
		batch.SerialConsistency(gocql.LocalSerial)
		if first {
			batch.Query(r.guardNew, seq, pid)
		} else {
			batch.Query(r.guard, seq, pid, seq-1)
		}
	}
	batch.Query(r.insert, pid, seq, u, fmt.Sprint(bucket), benchPayload, tags)
	if r.lwt {
		applied, iter, err := batch.MapExecCAS(map[string]any{})
		if iter != nil {
			_ = iter.Close()
		}
		if err != nil || !applied {
			b.Fatalf("raw conditional write of %s %d: applied %v, %v", pid, seq, applied, err)
		}
	} else if err := batch.Exec(); err != nil {
		b.Fatal(err)
	}
	if r.verify {
		var h *int64
		if err := r.s.Session().Query(r.static, pid).Consistency(gocql.Quorum).WithContext(b.Context()).Scan(&h); err != nil {
			b.Fatal(err)
		}
	}
	for _, tag := range tags {
		tu := gocql.UUIDFromTime(time.Now())
		if err := r.s.Session().Query(r.tagRow, tag, bucket, tu, pid, seq, seq, benchPayload).WithContext(b.Context()).Exec(); err != nil {
			b.Fatal(err)
		}
		if err := r.s.Session().Query(r.progrs, pid, tag, seq, seq, tu).WithContext(b.Context()).Exec(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite1000IDs: 1,000 ids persisting concurrently through the
// journal front, one goroutine per id writing its own events one at a time
// (b.N events in all), untagged and with one tag. Beside it, in turns of a
// fifth of the events each, the same rows written with the driver by 1,000
// goroutines: "raw" without the conditional guard (what Pekko does: a
// second writer overwrites), "raw-lwt" with it (the cost of detecting a
// second writer is the difference between the two), "raw-verify" without
// it but each write followed by a quorum read of the partition's static
// column (a claim's cost per write). "conditional-events/s" is Annals
// again, through a store of the conditional guard (GuardConditional, a
// keyspace that held events before), on the same ids of a keyspace of its
// own; "events/s" is the claims guard (a new keyspace's).
func BenchmarkWrite1000IDs(b *testing.B) {
	const ids, turns = 1000, 5
	for _, tags := range [][]string{nil, {"bench"}} {
		b.Run(fmt.Sprintf("tags=%d", len(tags)), func(b *testing.B) {
			s := cassandratest.Open(b)
			var annalsTime, condTime time.Duration
			f := enginetest.MeteredFront(b, s.Journal(), engine.Config{}, func() time.Duration { return annalsTime })
			// The same through a store of the conditional guard (a Paxos
			// round per write), on a keyspace of its own.
			sc := cassandratest.Open(b, cassandra.WithWriteGuard(cassandra.GuardConditional))
			fc, err := engine.NewFront(sc.Journal(), engine.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = fc.Close() })
			rv := newRawWriter(s, false)
			rv.verify = true
			raws := map[string]*rawWriter{"raw": newRawWriter(s, false), "raw-lwt": newRawWriter(s, true), "raw-verify": rv}
			rawTime := map[string]time.Duration{}
			perID := max((b.N+ids-1)/ids, turns)
			ctx := b.Context()
			for turn := range turns {
				from, to := int64(perID*turn/turns), int64(perID*(turn+1)/turns)
				// persist writes each id's events from..to through front,
				// one goroutine per id, and returns the wall time.
				persist := func(front *engine.Front) time.Duration {
					start := time.Now()
					var wg sync.WaitGroup
					for i := range ids {
						pid := fmt.Sprintf("Bench|w-%d", i)
						wg.Go(func() {
							for seq := from + 1; seq <= to; seq++ {
								if err := front.Persist(ctx, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{benchEvent(pid, seq, tags)}}); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					return time.Since(start)
				}
				annalsTime += persist(f)
				condTime += persist(fc)
				var wg sync.WaitGroup
				for name, r := range raws {
					start := time.Now()
					for i := range ids {
						pid := fmt.Sprintf("Raw%s|w-%d-%d", name, i, turn)
						wg.Go(func() {
							for seq := from + 1; seq <= to; seq++ {
								r.write(b, pid, seq, seq == from+1, tags)
							}
						})
					}
					wg.Wait()
					rawTime[name] += time.Since(start)
				}
			}
			events := float64(perID * ids)
			b.ReportMetric(events/annalsTime.Seconds(), "events/s")
			b.ReportMetric(events/condTime.Seconds(), "conditional-events/s")
			b.ReportMetric(events/rawTime["raw"].Seconds(), "raw-events/s")
			b.ReportMetric(events/rawTime["raw-lwt"].Seconds(), "raw-lwt-events/s")
			b.ReportMetric(events/rawTime["raw-verify"].Seconds(), "raw-verify-events/s")
		})
	}
}

// BenchmarkReplay10000: Journal.Replay of 10,000 events of one id; the
// baseline pages through the same rows and columns of the partition with
// one select, scanning them into the same fields.
func BenchmarkReplay10000(b *testing.B) {
	const n = 10_000
	s := cassandratest.Open(b)
	for from := int64(1); from <= n; from += 500 {
		w := journal.AtomicWrite{PersistenceID: "Bench|replay"}
		for seq := from; seq < from+500; seq++ {
			w.Events = append(w.Events, benchEvent("Bench|replay", seq, nil))
		}
		mustWriteAll(b, s.Journal(), w)
	}
	b.Run("annals", func(b *testing.B) {
		for b.Loop() {
			count := 0
			for _, err := range s.Journal().Replay(b.Context(), "Bench|replay", 1, n, n) {
				if err != nil {
					b.Fatal(err)
				}
				count++
			}
			if count != n {
				b.Fatalf("replayed %d", count)
			}
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("raw", func(b *testing.B) {
		cql := `SELECT sequence_nr, timestamp, writer_uuid, ser_id, ser_manifest, event, meta, tags FROM ` + s.Keyspace() + `.messages WHERE persistence_id = ? AND partition_nr = 0 AND sequence_nr >= ? AND sequence_nr <= ?`
		for b.Loop() {
			it := s.Session().Query(cql, "Bench|replay", 1, n).WithContext(b.Context()).Iter()
			var (
				seq           int64
				u             gocql.UUID
				writer, man   string
				ser           int32
				payload, meta []byte
				tags          []string
				count         int
			)
			for it.Scan(&seq, &u, &writer, &ser, &man, &payload, &meta, &tags) {
				_ = slices.Clone(payload)
				count++
			}
			if err := it.Close(); err != nil || count != n {
				b.Fatal(count, err)
			}
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkTagCatchUp100k: a current events-by-tag query over 100,000
// events of 1,000 ids (Hour buckets), from the first time bucket an hour
// back, and from Pekko's default (2015-11-20: about 96,000 empty hourly
// buckets before the first row, probed a hundred at a time). The baseline
// reads the same rows and columns of the tag's bucket partitions with one
// select per bucket, knowing where they are.
func BenchmarkTagCatchUp100k(b *testing.B) {
	const ids, perID = 1000, 100
	start := time.Now()
	s := cassandratest.Open(b, cassandra.WithEventualConsistencyDelay(0), cassandra.WithFirstTimeBucket(start.Add(-time.Hour)))
	var ws []journal.AtomicWrite
	for i := range ids {
		pid := fmt.Sprintf("Bench|tag-%d", i)
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := int64(1); seq <= perID; seq++ {
			w.Events = append(w.Events, benchEvent(pid, seq, []string{"catchup"}))
		}
		ws = append(ws, w)
	}
	for c := range slices.Chunk(ws, 100) {
		mustWriteAll(b, s.Journal(), c...)
	}
	const n = ids * perID
	count := func(b *testing.B, rj *cassandra.ReadJournal) {
		got := 0
		for _, err := range rj.CurrentEventsByTag(b.Context(), "catchup", query.NoOffset()) {
			if err != nil {
				b.Fatal(err)
			}
			got++
		}
		if got != n {
			b.Fatalf("read %d events, want %d", got, n)
		}
	}
	b.Run("annals", func(b *testing.B) {
		for b.Loop() {
			count(b, s.ReadJournal())
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("from-2015/annals", func(b *testing.B) {
		s2, err := cassandra.Open(b.Context(), "cassandra://"+cassandratest.Address()+"/"+s.Keyspace(), cassandra.WithEventualConsistencyDelay(0))
		if err != nil {
			b.Fatal(err)
		}
		defer s2.Close()
		for b.Loop() {
			count(b, s2.ReadJournal())
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("raw", func(b *testing.B) {
		cql := `SELECT timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr, writer_uuid, ser_id, ser_manifest, event_manifest, event, meta FROM ` +
			s.Keyspace() + `.tag_views WHERE tag_name = ? AND timebucket = ?`
		first, last := s.BucketSize().Key(start), s.BucketSize().Key(time.Now())
		for b.Loop() {
			got := 0
			for bucket := first; bucket <= last; bucket += s.BucketSize().Duration().Milliseconds() {
				it := s.Session().Query(cql, "catchup", bucket).WithContext(b.Context()).Iter()
				var (
					u                      gocql.UUID
					pid, writer, man, eman string
					tagSeq, seq            int64
					ser                    int32
					payload, meta          []byte
				)
				for it.Scan(&u, &pid, &tagSeq, &seq, &writer, &ser, &man, &eman, &payload, &meta) {
					_ = slices.Clone(payload)
					got++
				}
				if err := it.Close(); err != nil {
					b.Fatal(err)
				}
			}
			if got != n {
				b.Fatalf("read %d rows, want %d", got, n)
			}
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkLiveTagLag: the time from a tagged write's return to its
// delivery by a live events-by-tag query, p50 and p99 over b.N events
// written 20 ms apart, with the default eventual-consistency delay (5 s,
// the floor of the lag) and with none.
func BenchmarkLiveTagLag(b *testing.B) {
	for _, delay := range []time.Duration{cassandra.DefaultEventualConsistencyDelay, 0} {
		b.Run(fmt.Sprintf("delay=%v", delay), func(b *testing.B) {
			s := cassandratest.Open(b, cassandra.WithEventualConsistencyDelay(delay), cassandra.WithFirstTimeBucket(time.Now().Add(-time.Hour)))
			stream := s.ReadJournal().EventsByTag(b.Context(), "lag", query.NoOffset())
			written, delivered := make([]time.Time, b.N), make([]time.Time, b.N)
			done := make(chan struct{})
			go func() {
				defer close(done)
				n := 0
				for env := range stream.All() {
					delivered[env.SequenceNr-1] = time.Now()
					if n++; n == b.N {
						return
					}
				}
			}()
			for i := range b.N {
				mustWriteAll(b, s.Journal(), journal.AtomicWrite{PersistenceID: "Bench|lag", Events: []journal.Repr{benchEvent("Bench|lag", int64(i+1), []string{"lag"})}})
				written[i] = time.Now()
				time.Sleep(20 * time.Millisecond) // the write rate of the benchmark, not a wait for a result
			}
			<-done
			lags := make([]time.Duration, b.N)
			for i := range lags {
				lags[i] = delivered[i].Sub(written[i])
			}
			slices.Sort(lags)
			b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
