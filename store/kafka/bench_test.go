package kafka_test

// Benchmarks of the Kafka journal on the real broker, with PostgreSQL as
// the eventual store, each beside a baseline doing the same work with
// franz-go (and pgx) directly, in the same run:
//
//	scripts/bench kafka
//	go test -run '^$' -bench . -benchtime 1x ./store/kafka/
//
// Every benchmark uses topics of its own and skips when no broker or
// server answers.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/engine/enginetest"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

var benchPayload = make([]byte, 100)

func benchEvent(pid string, seq int64) journal.Repr {
	return journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: benchPayload, SerializerID: 4, Manifest: "m", WriterID: "w"}
}

// benchTopic names a topic of the benchmark's own, deleted when it ends.
func benchTopic(b *testing.B, brokers []string, name string) string {
	return kafkatest.Prefix(b, brokers, "bench") + name
}

// BenchmarkWrite1000IDs: 1,000 entities persisting concurrently through
// the journal front, one goroutine per id writing its own events one at a
// time (b.N events in all); each id's highest number is read first, as its
// recovery would, outside the measure. Beside it, in turns of a fifth of
// the events each, 1,000 goroutines producing records of the same size
// with franz-go's ProduceSync ("raw", the same client settings:
// idempotent, acks=all).
func BenchmarkWrite1000IDs(b *testing.B) {
	const ids, turns = 1000, 5
	brokers := kafkatest.Real(b)
	tables := pgeventualtest.Open(b)
	topic := benchTopic(b, brokers, "write")
	j := kafkatest.Open(b, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
	var annalsTime, rawTime time.Duration
	f := enginetest.MeteredFront(b, j, engine.Config{}, func() time.Duration { return annalsTime })
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.AllowAutoTopicCreation())
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	ctx := b.Context()
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			if _, err := f.HighestSequenceNr(ctx, fmt.Sprintf("Bench|w-%d", i), 0); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	// The raw records: the size of an Annals Append of one event.
	value, _, err := encodeForBench(benchEvent("Bench|w-0", 1))
	if err != nil {
		b.Fatal(err)
	}
	perID := max((b.N+ids-1)/ids, turns)
	for turn := range turns {
		from, to := int64(perID*turn/turns), int64(perID*(turn+1)/turns)
		start := time.Now()
		for i := range ids {
			pid := fmt.Sprintf("Bench|w-%d", i)
			wg.Go(func() {
				for seq := from + 1; seq <= to; seq++ {
					if err := f.Persist(ctx, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{benchEvent(pid, seq)}}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		annalsTime += time.Since(start)
		start = time.Now()
		for i := range ids {
			key := []byte(fmt.Sprintf("Raw|w-%d", i))
			wg.Go(func() {
				for seq := from + 1; seq <= to; seq++ {
					if err := raw.ProduceSync(ctx, &kgo.Record{Topic: topic + "-raw", Key: key, Value: value}).FirstErr(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		rawTime += time.Since(start)
	}
	events := float64(perID * ids)
	b.ReportMetric(events/annalsTime.Seconds(), "events/s")
	b.ReportMetric(events/rawTime.Seconds(), "raw-events/s")
}

// encodeForBench returns an Append's value bytes for one event.
func encodeForBench(e journal.Repr) ([]byte, map[string][]byte, error) {
	es := wire.Events{Events: []wire.Event{{SeqNr: e.SequenceNr, Payload: &wire.Payload{Type: wire.Binary,
		Data: wire.EncodePersistentBinary(wire.Persistent{WriterUUID: e.WriterID, SerializerID: e.SerializerID, Manifest: e.Manifest, Payload: e.Payload})}}}}
	v, err := wire.EncodeBinary(es)
	return v, nil, err
}

// BenchmarkRecovery1000: an entity's recovery read (ReadRecovery, as the
// entity runtime makes it: one Mark, the pointer, the head, the rows and,
// when needed, the topic's head) of an id with
// 1,000 events in 10 appends of 100, with the eventual store holding all
// of them ("replicated"), the first half ("half"), or none
// ("unreplicated"), through one journal opened before, with the head
// cache off ("annals": each unreplicated head is read from the
// partition) and on ("annals-cached", after a first recovery). Beside it ("raw"),
// a new franz-go consumer reading the id's partition from its first record
// to its last.
func BenchmarkRecovery1000(b *testing.B) {
	const n, per = 1000, 100
	brokers := kafkatest.Real(b)
	for _, c := range []struct {
		name       string
		replicated int // appends replicated
	}{{"replicated", n / per}, {"half", n / per / 2}, {"unreplicated", 0}} {
		b.Run(c.name, func(b *testing.B) {
			tables := pgeventualtest.Open(b)
			topic := benchTopic(b, brokers, "recovery-"+c.name)
			w := kafkatest.Open(b, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
			pid := "Bench|r"
			for from := int64(1); from <= n; from += per {
				aw := journal.AtomicWrite{PersistenceID: pid}
				for s := from; s < from+per; s++ {
					aw.Events = append(aw.Events, benchEvent(pid, s))
				}
				if res, err := w.Write(b.Context(), []journal.AtomicWrite{aw}); err != nil || res != nil {
					b.Fatal(res, err)
				}
			}
			head := partitionOf(b, brokers, topic, pid)
			if c.replicated > 0 {
				appends := 0
				for i, r := range head {
					if a, ok, _ := wire.DecodeRecord(r); ok && a.Header.Kind == wire.Append {
						if appends++; appends == c.replicated {
							if err := eventual.Replicate(b.Context(), tables, head[:i+1], time.Now()); err != nil {
								b.Fatal(err)
							}
							break
						}
					}
				}
			}
			for _, cache := range []struct {
				name    string
				entries int
			}{{"annals", 0}, {"annals-cached", kafka.DefaultHeadCacheEntries}} {
				b.Run(cache.name, func(b *testing.B) {
					j := kafkatest.Open(b, brokers, tables, kafka.WithTopic(func(string) string { return topic }), kafka.WithHeadCache(cache.entries))
					read := func() {
						res, err := j.ReadRecovery(b.Context(), recovery.Request{PersistenceID: pid, MaxEvents: n})
						if err != nil || res.Highest != n || len(res.Events) != n {
							b.Fatal(res.Highest, len(res.Events), err)
						}
					}
					read() // the cache, when on, has read the head
					for b.Loop() {
						read()
					}
					b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
				})
			}
			b.Run("raw", func(b *testing.B) {
				first, last := head[0], head[len(head)-1]
				for b.Loop() {
					if events := rawRead(b, brokers, topic, first.Partition, first.Offset, last.Offset, pid); events != n {
						b.Fatalf("read %d events", events)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
			})
		})
	}
}

// BenchmarkReplicator: the replicator copying 100,000 single-event appends
// of 1,000 ids into PostgreSQL (a new schema each time), from the topic's
// start until every event is stored ("events/s"). Beside it ("raw-events/s"),
// a consumer of the same topic inserting each poll's events into a table
// of the same key columns with one pgx batch, then an offset row, per
// poll. The two alternate within each op (which goes first alternates
// too), so that the load of a shared machine falls on both; "ratio" is
// annals' rate over raw's.
func BenchmarkReplicator(b *testing.B) {
	const ids, perID = 1000, 100
	brokers := kafkatest.Real(b)
	topic := benchTopic(b, brokers, "replicator")
	tables := pgeventualtest.Open(b)
	w := kafkatest.Open(b, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
	writeSingles(b, w, "Bench|p-", ids, perID)
	events := float64(perID * ids)
	annals := func() time.Duration {
		return timeReplicator(b, brokers, topic, pgeventualtest.Open(b), int64(perID*ids))
	}
	_, schema := pgtest.Schema(b)
	pool, err := pgxpool.New(b.Context(), pgtest.Server(b))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	for _, stmt := range []string{`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + schema + `.journal (id text, topic text, seq_nr bigint, "offset" bigint, timestamp timestamptz, payload_bin bytea, PRIMARY KEY (id, topic, seq_nr))`,
		`CREATE TABLE ` + schema + `.pointer (topic text, partition int, "offset" bigint, PRIMARY KEY (topic, partition))`} {
		if _, err := pool.Exec(b.Context(), stmt); err != nil {
			b.Fatal(err)
		}
	}
	raw := func() time.Duration {
		if _, err := pool.Exec(b.Context(), `TRUNCATE `+schema+`.journal`); err != nil {
			b.Fatal(err)
		}
		return rawConsume(b, brokers, topic, perID*ids, func(p kgo.FetchTopicPartition) (stored int) {
			var batch pgx.Batch
			for _, r := range p.Records {
				if len(r.Value) == 0 {
					continue
				}
				es, err := wire.DecodeBinary(r.Value)
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range es.Events {
					batch.Queue(`INSERT INTO `+schema+`.journal (id, topic, seq_nr, "offset", timestamp, payload_bin) VALUES ($1, $2, $3, $4, $5, $6)
						ON CONFLICT DO NOTHING`, string(r.Key), r.Topic, e.SeqNr, r.Offset, r.Timestamp, e.Payload.Data)
					stored++
				}
			}
			if len(p.Records) == 0 {
				return stored
			}
			batch.Queue(`INSERT INTO `+schema+`.pointer VALUES ($1, $2, $3) ON CONFLICT (topic, partition) DO UPDATE SET "offset" = EXCLUDED."offset"`,
				p.Topic, p.Partition, p.Records[len(p.Records)-1].Offset)
			if err := pool.SendBatch(b.Context(), &batch).Close(); err != nil {
				b.Fatal(err)
			}
			return stored
		})
	}
	alternate(b, events, annals, raw)
}

// rawConsume is a baseline's consume loop: a new consumer reads topic
// from its start, apply stores each partition's records of a poll and
// returns how many events it stored, until want are; it returns how long
// that took.
func rawConsume(b *testing.B, brokers []string, topic string, want int, apply func(kgo.FetchTopicPartition) int) time.Duration {
	b.Helper()
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	for stored := 0; stored < want; {
		fs := cl.PollFetches(b.Context())
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) { stored += apply(p) })
	}
	return time.Since(start)
}

// countingTxTables is a countingTables of a store with transactions.
type countingTxTables struct{ *countingTables }

// InTx passes the transaction through, counting inside it.
func (c countingTxTables) InTx(ctx context.Context, keys []eventual.Key, f func(eventual.Tables) error) error {
	tt := c.Tables.(eventual.TxTables)
	var stored int64
	err := tt.InTx(ctx, keys, func(tx eventual.Tables) error {
		stored = 0
		return f(&txCounter{Tables: tx, n: &stored})
	})
	if err == nil && c.n.Add(stored) == c.want {
		close(c.done)
	}
	return err
}

type txCounter struct {
	eventual.Tables
	n *int64
}

func (c *txCounter) InsertRecords(ctx context.Context, key eventual.Key, seg int64, id [16]byte, rs []eventual.Record) error {
	if err := c.Tables.InsertRecords(ctx, key, seg, id, rs); err != nil {
		return err
	}
	*c.n += int64(len(rs))
	return nil
}

// alternate times annals and raw, each copying events events, once per
// op, the one that goes first alternating, so that a shared machine's
// load falls on both; it reports their rates and annals' over raw's.
func alternate(b *testing.B, events float64, annals, raw func() time.Duration) {
	var annalsTime, rawTime time.Duration
	for i := range b.N {
		if i%2 == 0 {
			annalsTime += annals()
			rawTime += raw()
		} else {
			rawTime += raw()
			annalsTime += annals()
		}
	}
	b.ReportMetric(float64(b.N)*events/annalsTime.Seconds(), "events/s")
	b.ReportMetric(float64(b.N)*events/rawTime.Seconds(), "raw-events/s")
	b.ReportMetric(rawTime.Seconds()/annalsTime.Seconds(), "ratio")
}

// writeSingles writes perID single-event appends to each of ids ids
// (prefix followed by the id's number) through w, an id per goroutine.
func writeSingles(b *testing.B, w journal.Journal, prefix string, ids, perID int) {
	b.Helper()
	var wg sync.WaitGroup
	for i := range ids {
		pid := fmt.Sprintf("%s%d", prefix, i)
		wg.Go(func() {
			for s := int64(1); s <= int64(perID); s++ {
				if res, err := w.Write(b.Context(), []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{benchEvent(pid, s)}}}); err != nil || res != nil {
					b.Error(res, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// timeReplicator runs a replicator of topic into tables, from the topic's
// start in a new consumer group, until want events are stored, and
// returns how long that took.
func timeReplicator(b *testing.B, brokers []string, topic string, tables eventual.Tables, want int64) time.Duration {
	b.Helper()
	total, _ := timeReplicatorRunning(b, brokers, topic, tables, want)
	return total
}

// timeReplicatorRunning is timeReplicator that also returns how long the
// replicator took from its first write of rows (once its consumer joined
// its group, read its pointers and fetched).
func timeReplicatorRunning(b *testing.B, brokers []string, topic string, tables eventual.Tables, want int64) (total, running time.Duration) {
	b.Helper()
	counted := &countingTables{Tables: tables, want: want, done: make(chan struct{})}
	// The replicator sees a TxTables only when the store is one, so that
	// it takes the store's own path (a Cassandra store's keys at once).
	var replicated eventual.Tables = counted
	if _, ok := tables.(eventual.TxTables); ok {
		replicated = &countingTxTables{counted}
	}
	r, err := kafka.NewReplicator(brokers, replicated, kafka.WithTopics(topic), kafka.WithGroup(benchTopic(b, brokers, "group")))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	finished := make(chan error, 1)
	start := time.Now()
	go func() { finished <- r.Run(ctx) }()
	select {
	case <-counted.done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("replicated %d of %d events", counted.n.Load(), counted.want)
	}
	end := time.Now()
	cancel()
	if err := <-finished; err != nil {
		b.Fatal(err)
	}
	return end.Sub(start), end.Sub(time.Unix(0, counted.first.Load()))
}

// countingTables counts the events stored and closes done when want are.
type countingTables struct {
	eventual.Tables
	n    atomic.Int64
	want int64
	done chan struct{}
	// first is when the first InsertRecords began (Unix nanoseconds).
	first atomic.Int64
}

func (c *countingTables) InsertRecords(ctx context.Context, key eventual.Key, seg int64, id [16]byte, rs []eventual.Record) error {
	c.first.CompareAndSwap(0, time.Now().UnixNano())
	if err := c.Tables.InsertRecords(ctx, key, seg, id, rs); err != nil {
		return err
	}
	if c.n.Add(int64(len(rs))) == c.want {
		close(c.done)
	}
	return nil
}

// BenchmarkRecoveryBehind: recoveries (ReadRecovery, one per op, of ids
// in turn) by a journal started while the replicator is behind by lag
// single-event appends (none replicated, 100-byte payloads), as a service
// that restarts during a replication backlog meets them: 1,000 ids of 10
// events each, written first, then other ids' appends up to lag. Each
// recovery reads 10 events, whatever the lag. The head cache (default
// settings) reads the backlog once; the first recovery waits for it,
// outside the measure. Beside it ("raw"), what a reader without the cache
// does: a new franz-go consumer reading the partition from the pointer
// (here its start) to its end, decoding the id's events. Lags of 10,000
// and 90,000 fit the cache's default of 100,000 actions per partition;
// 300,000 does not, and shows the cost past the bound (recoveries read
// the partition, four at a time).
func BenchmarkRecoveryBehind(b *testing.B) {
	const ids, events = 1000, 10
	brokers := kafkatest.Real(b)
	for _, lag := range []int{10_000, 90_000, 300_000} {
		b.Run(fmt.Sprintf("lag=%d", lag), func(b *testing.B) {
			tables := pgeventualtest.Open(b)
			topic := benchTopic(b, brokers, fmt.Sprintf("behind-%d", lag))
			opts := []kafka.Option{kafka.WithTopic(func(string) string { return topic })}
			// The writer's cache holds the whole backlog: each first write of
			// an id reads its head.
			w := kafkatest.Open(b, brokers, tables, append(opts, kafka.WithHeadCache(2*lag))...)
			pid := func(i int) string { return fmt.Sprintf("Bench|%d", i) }
			// Rounds of 1,000 single-event appends: the measured ids' 10
			// events first, then other ids' one event each.
			for round := range lag / ids {
				ws := make([]journal.AtomicWrite, ids)
				for i := range ids {
					id, seq := pid(i), int64(round+1)
					if round >= events {
						id, seq = pid(round*ids+i), 1
					}
					ws[i] = journal.AtomicWrite{PersistenceID: id, Events: []journal.Repr{benchEvent(id, seq)}}
				}
				if res, err := w.Write(b.Context(), ws); err != nil || res != nil {
					b.Fatal(res, err)
				}
			}
			const want = events
			// The backlog ends before this record (the journal's Marks
			// are in it too): the raw reader reads up to it.
			end := endOfBacklog(b, brokers, topic)
			b.Run("annals", func(b *testing.B) {
				j := kafkatest.Open(b, brokers, tables, opts...)
				recover := func(i int) {
					res, err := j.ReadRecovery(b.Context(), recovery.Request{PersistenceID: pid(i % ids), ToSequenceNr: 1 << 62, MaxEvents: 10_000})
					if err != nil || res.Highest != want || int64(len(res.Events)) != want {
						b.Fatal(res.Highest, len(res.Events), err)
					}
				}
				recover(0) // the cache has read the backlog
				i := 0
				for b.Loop() {
					recover(i)
					i++
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "recoveries/s")
				b.ReportMetric(float64(kafka.HeadReads(j)), "partition-reads")
			})
			b.Run("raw", func(b *testing.B) {
				i := 0
				for b.Loop() {
					id := pid(i % ids)
					i++
					if events := rawRead(b, brokers, topic, 0, 0, end, id); events != want {
						b.Fatalf("read %d events of %s", events, id)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "recoveries/s")
			})
		})
	}
}

// endOfBacklog produces a record without an action header on topic (which
// readers skip) and returns its offset.
func endOfBacklog(b *testing.B, brokers []string, topic string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	r := &kgo.Record{Topic: topic, Key: []byte("end of backlog")}
	if err := cl.ProduceSync(b.Context(), r).FirstErr(); err != nil {
		b.Fatal(err)
	}
	return r.Offset
}

// rawRead is what a reader without Annals does to recover id: a new
// franz-go consumer of a partition from offset from to offset last,
// decoding the id's Append records; it returns the events read.
func rawRead(b *testing.B, brokers []string, topic string, partition int32, from, last int64, id string) int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	events := 0
	for {
		fs := cl.PollFetches(b.Context())
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		for _, r := range fs.Records() {
			if string(r.Key) == id && len(r.Value) > 0 && len(r.Headers) > 0 && r.Headers[0].Key == wire.HeaderKey {
				es, err := wire.DecodeBinary(r.Value)
				if err != nil {
					b.Fatal(err)
				}
				events += len(es.Events)
			}
			if r.Offset >= last {
				return events
			}
		}
	}
}
