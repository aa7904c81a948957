package kafka_test

import (
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
// pointer row, per poll. The two
// alternate within each op; "ratio" is annals' rate over raw's.
func BenchmarkReplicatorCassandra(b *testing.B) {
	const ids, perID = 1000, 50
	brokers := kafkatest.Real(b)
	writerTables, session, keyspace := cqltest.Open(b) // skips without Cassandra
	topic := benchTopic(b, brokers, "replicator-cql")
	w := kafkatest.Open(b, brokers, writerTables, kafka.WithTopic(func(string) string { return topic }))
	writeSingles(b, w, "Bench|c-", ids, perID)
	events := float64(perID * ids)
	annals := func() time.Duration {
		tables, _, _ := cqltest.Open(b)
		return timeReplicator(b, brokers, topic, tables, int64(perID*ids))
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
	alternate(b, events, annals, raw)
}
