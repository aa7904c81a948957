package kafka_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
)

// BenchmarkReplicatorCassandra: the replicator copying 50,000 single-event
// appends of 1,000 ids into Cassandra (the Scala replicator's keyspace
// layout, a new keyspace each time), from the topic's start until every
// event is stored ("events/s"). Beside it ("raw-events/s"), a consumer of
// the same topic inserting each poll's events with gocql into a table of
// the same key columns, an unlogged batch per key (one Cassandra
// partition), 16 keys at once (the replicator's KeyConcurrency), then a
// pointer row, per poll ("ratio": annals' rate over raw's). Beside both,
// "same-rows": a consumer writing with gocql the rows the replicator
// writes, in the same keyspace layout (sameRowsWriter), the driver doing
// the replicator's work without Annals ("same-rows-ratio": annals' rate
// over its; "same-rows-running-ratio": the same from each side's first
// write of rows, leaving out the replicator's start: joining its consumer
// group and reading its pointers, which the consumer without a group does
// not do). The three take turns within each op.
func BenchmarkReplicatorCassandra(b *testing.B) {
	const ids, perID = 1000, 50
	brokers := kafkatest.Real(b)
	writerTables, session, keyspace := cqltest.Open(b) // skips without Cassandra
	topic := benchTopic(b, brokers, "replicator-cql")
	w := kafkatest.Open(b, brokers, writerTables, kafka.WithTopic(func(string) string { return topic }))
	writeSingles(b, w, "Bench|c-", ids, perID)
	events := float64(perID * ids)
	var annalsRunning, sameRunning time.Duration
	annals := func() time.Duration {
		tables, _, _ := cqltest.Open(b)
		total, running := timeReplicatorRunning(b, brokers, topic, tables, int64(perID*ids))
		annalsRunning += running
		return total
	}
	for _, stmt := range []string{
		`CREATE TABLE ` + keyspace + `.raw_journal (id text, topic text, seq_nr bigint, offset bigint, timestamp timestamp, payload_bin blob, PRIMARY KEY ((id, topic), seq_nr))`,
		`CREATE TABLE ` + keyspace + `.raw_pointer (topic text, partition int, offset bigint, PRIMARY KEY ((topic, partition)))`} {
		if err := session.Query(stmt).ExecContext(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	raw := func() time.Duration {
		if err := session.Query(`TRUNCATE ` + keyspace + `.raw_journal`).ExecContext(b.Context()); err != nil {
			b.Fatal(err)
		}
		return rawConsume(b, brokers, topic, perID*ids, func(p kgo.FetchTopicPartition) (stored int) {
			if len(p.Records) == 0 {
				return 0
			}
			// An unlogged batch per key (one Cassandra partition),
			// 16 keys at once.
			byKey := map[string][]*kgo.Record{}
			var keys []string
			for _, r := range p.Records {
				if len(r.Value) == 0 {
					continue
				}
				if _, ok := byKey[string(r.Key)]; !ok {
					keys = append(keys, string(r.Key))
				}
				byKey[string(r.Key)] = append(byKey[string(r.Key)], r)
			}
			g, ctx := errgroup.WithContext(b.Context())
			g.SetLimit(eventual.KeyConcurrency)
			for _, k := range keys {
				batch := session.Batch(gocql.UnloggedBatch).Consistency(gocql.One)
				for _, r := range byKey[k] {
					es, err := wire.DecodeBinary(r.Value)
					if err != nil {
						b.Fatal(err)
					}
					for _, e := range es.Events {
						stored++
						batch.Query(`INSERT INTO `+keyspace+`.raw_journal (id, topic, seq_nr, offset, timestamp, payload_bin) VALUES (?, ?, ?, ?, ?, ?)`,
							k, r.Topic, e.SeqNr, r.Offset, r.Timestamp, e.Payload.Data)
					}
				}
				g.Go(func() error { return batch.ExecContext(ctx) })
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			if err := session.Query(`INSERT INTO `+keyspace+`.raw_pointer (topic, partition, offset) VALUES (?, ?, ?)`,
				p.Topic, p.Partition, p.Records[len(p.Records)-1].Offset).Consistency(gocql.One).ExecContext(b.Context()); err != nil {
				b.Fatal(err)
			}
			return stored
		})
	}
	same := func() time.Duration {
		_, session, ks := cqltest.Open(b) // a new keyspace of the Scala layout
		var first atomic.Int64
		start := time.Now()
		total := rawConsume(b, brokers, topic, perID*ids, sameRowsWriter(b, session, ks, &first))
		sameRunning += start.Add(total).Sub(time.Unix(0, first.Load()))
		return total
	}
	// The three take turns, the first rotating from op to op.
	runs := []func() time.Duration{annals, raw, same}
	took := make([]time.Duration, len(runs))
	for i := range b.N {
		for k := range runs {
			j := (i + k) % len(runs)
			took[j] += runs[j]()
		}
	}
	rate := func(d time.Duration) float64 { return float64(b.N) * events / d.Seconds() }
	b.ReportMetric(rate(took[0]), "events/s")
	b.ReportMetric(rate(took[1]), "raw-events/s")
	b.ReportMetric(rate(took[2]), "same-rows-events/s")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "ratio")
	b.ReportMetric(took[2].Seconds()/took[0].Seconds(), "same-rows-ratio")
	b.ReportMetric(sameRunning.Seconds()/annalsRunning.Seconds(), "same-rows-running-ratio")
}

// sameRowsWriter returns a rawConsume apply that writes with gocql the
// rows the replicator writes into the Scala layout, as a consumer without
// Annals that had to keep that layout would: each record decoded
// (wire.DecodeRecord: header and events), per key the journal rows of its
// appends (all 16 columns, absent ones unset; a logged batch for several,
// one partition) and its head (read at the key's first sight, as a
// consumer that may restart must, then inserted or updated; what it knows
// of a key it keeps in memory), 16 keys at once, then the partition's
// pointer. It skips the replicator's checks of numbers against the head.
//
// first is set to when its first write began (Unix nanoseconds), as the
// replicator's side is timed from its first InsertRecords.
func sameRowsWriter(b *testing.B, session *gocql.Session, ks string, first *atomic.Int64) func(kgo.FetchTopicPartition) int {
	insertRecord := `INSERT INTO ` + ks + `.journal (id, topic, segment, seq_nr, partition, offset, timestamp, origin, version, meta_record_id, tags, payload_type, payload_txt, payload_bin, metadata, headers) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insertHead := `INSERT INTO ` + ks + `.metajournal (topic, segment, id, partition, offset, segment_size, seq_nr, delete_to, created, created_date, updated, expire_after, expire_on, record_id, origin, properties) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	updateHead := `UPDATE ` + ks + `.metajournal SET partition = ?, offset = ?, seq_nr = ?, delete_to = ?, updated = ?, expire_after = ?, expire_on = ? WHERE id = ? AND topic = ? AND segment = ?`
	insertPointer := `INSERT INTO ` + ks + `.pointer2 (topic, partition, offset, created, updated) VALUES (?, ?, ?, ?, ?)`
	updatePointer := `UPDATE ` + ks + `.pointer2 SET offset = ?, updated = ? WHERE topic = ? AND partition = ?`
	selectHead := `SELECT segment, partition, offset, segment_size, seq_nr, delete_to, expire_after, expire_on, record_id FROM ` + ks + `.metajournal WHERE topic = ? AND segment IN (?, ?) AND id = ?`
	type head struct{ seqNr int64 }
	var mu sync.Mutex
	heads := map[string]*head{}
	pointers := map[int32]bool{}
	unset := func(v any) any {
		if v == nil {
			return gocql.UnsetValue
		}
		return v
	}
	return func(p kgo.FetchTopicPartition) (stored int) {
		if len(p.Records) == 0 {
			return 0
		}
		type keyed struct {
			records []eventual.Record
		}
		byKey := map[string]*keyed{}
		var keys []string
		for _, r := range p.Records {
			hs := make(map[string][]byte, len(r.Headers))
			for _, h := range r.Headers {
				hs[h.Key] = h.Value
			}
			a, ok, err := wire.DecodeRecord(wire.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Headers: hs, Value: r.Value})
			if err != nil {
				b.Fatal(err)
			}
			if !ok || a.Header.Kind != wire.Append {
				continue
			}
			k := byKey[a.ID]
			if k == nil {
				k = &keyed{}
				byKey[a.ID] = k
				keys = append(keys, a.ID)
			}
			for _, e := range a.Events.Events {
				k.records = append(k.records, eventual.Record{Event: e, Timestamp: r.Timestamp, Origin: a.Header.Origin, Version: a.Header.Version,
					Partition: r.Partition, Offset: r.Offset, HeaderMetadata: a.Header.Metadata, PayloadMetadata: a.Events.Metadata})
			}
		}
		g, ctx := errgroup.WithContext(b.Context())
		g.SetLimit(eventual.KeyConcurrency)
		now := time.Now().UTC().Truncate(time.Millisecond)
		for _, id := range keys {
			rs := byKey[id].records
			stored += len(rs)
			g.Go(func() error {
				first.CompareAndSwap(0, time.Now().UnixNano())
				batch := session.Batch(gocql.LoggedBatch).WithContext(ctx)
				for _, r := range rs {
					row, err := r.Row()
					if err != nil {
						return err
					}
					var tags any = gocql.UnsetValue
					if len(row.Tags) > 0 {
						tags = row.Tags
					}
					segment := eventual.JournalSegment(r.Event.SeqNr, eventual.DefaultSegmentSize)
					args := []any{id, p.Topic, segment, r.Event.SeqNr, r.Partition, r.Offset, r.Timestamp.UTC(), unset(row.Origin), unset(row.Version),
						gocql.UnsetValue, tags, unset(row.PayloadType), unset(row.PayloadTxt), unset(row.PayloadBin), row.Metadata, gocql.UnsetValue}
					if len(rs) == 1 {
						if err := session.Query(insertRecord, args...).WithContext(ctx).Exec(); err != nil {
							return err
						}
						break
					}
					batch.Query(insertRecord, args...)
				}
				if len(rs) > 1 {
					if err := batch.Exec(); err != nil {
						return err
					}
				}
				last := rs[len(rs)-1]
				mu.Lock()
				h := heads[id]
				mu.Unlock()
				seg := eventual.MetaSegment(id, eventual.MetaSegments)
				if h == nil {
					// A key seen the first time: its head, if stored (a
					// consumer that restarts cannot know otherwise).
					it := session.Query(selectHead, p.Topic, seg, eventual.MetaSegment(id, eventual.OldMetaSegments), id).WithContext(ctx).Iter()
					found := it.NumRows() > 0
					if err := it.Close(); err != nil {
						return err
					}
					known := &head{}
					mu.Lock()
					heads[id] = known
					mu.Unlock()
					if found {
						h = known
					}
				}
				if h == nil {
					date := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
					return session.Query(insertHead, p.Topic, seg, id, last.Partition, last.Offset, eventual.DefaultSegmentSize,
						last.Event.SeqNr, nil, now, date, now, nil, nil, nil, nil, nil).WithContext(ctx).Exec()
				}
				return session.Query(updateHead, last.Partition, last.Offset, last.Event.SeqNr, nil, now, nil, nil, id, p.Topic, seg).WithContext(ctx).Exec()
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		last := p.Records[len(p.Records)-1].Offset
		mu.Lock()
		known := pointers[p.Partition]
		pointers[p.Partition] = true
		mu.Unlock()
		var err error
		if known {
			err = session.Query(updatePointer, last, now, p.Topic, p.Partition).WithContext(b.Context()).Exec()
		} else {
			err = session.Query(insertPointer, p.Topic, p.Partition, last, now, now).WithContext(b.Context()).Exec()
		}
		if err != nil {
			b.Fatal(err)
		}
		return stored
	}
}
