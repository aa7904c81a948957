// Package wiretest reads the Kafka journal fixtures shared beside the
// checkout (../shared/fixtures/kafka-journal): the Scala project's test
// resources and the records the Scala library wrote to a real broker.
// A test whose fixtures are not there fails when ANNALS_TEST_REQUIRE lists
// fixtures (CI), and is skipped otherwise. It also produces records
// no reader can decode, for the tests of those that must report them.
package wiretest

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/internal/fixtures"
	"github.com/annals-go/annals/store/kafka/wire"
)

// Dir returns the fixtures folder; when it is missing the test fails if
// ANNALS_TEST_REQUIRE lists fixtures (CI), and is skipped otherwise,
// naming the folder (internal/fixtures).
func Dir(t testing.TB) string {
	t.Helper()
	return fixtures.Dir(t, "kafka-journal")
}

// scalaRecord is a line of scala-written/journal-*.jsonl.
type scalaRecord struct {
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	TimestampMs int64  `json:"timestamp_ms"`
	Key         string `json:"key"`
	Headers     []struct {
		Key      string `json:"key"`
		ValueHex string `json:"value_hex"`
	} `json:"headers"`
	ValueNull bool   `json:"value_null"`
	ValueHex  string `json:"value_hex"`
}

// ScalaWritten returns the records of scala-written/<file> (for example
// "journal-anchors.jsonl"), in offset order, with the topic named by the
// file ("journal-anchors").
func ScalaWritten(t testing.TB, file string) []wire.Record {
	t.Helper()
	path := filepath.Join(Dir(t), "scala-written", file)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	topic := file[:len(file)-len(filepath.Ext(file))]
	var out []wire.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r scalaRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rec := wire.Record{Topic: topic, Partition: r.Partition, Offset: r.Offset, Key: []byte(r.Key),
			Timestamp: time.UnixMilli(r.TimestampMs).UTC(), Headers: map[string][]byte{}}
		for _, h := range r.Headers {
			v, err := hex.DecodeString(h.ValueHex)
			if err != nil {
				t.Fatalf("%s offset %d: header %s: %v", path, r.Offset, h.Key, err)
			}
			rec.Headers[h.Key] = v
		}
		if !r.ValueNull {
			if rec.Value, err = hex.DecodeString(r.ValueHex); err != nil {
				t.Fatalf("%s offset %d: value: %v", path, r.Offset, err)
			}
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ProduceUndecodable produces to topic on brokers an Append of key whose
// header says it holds event seq and whose value is not events (a record
// the replicator stops at), and returns it with its partition and offset.
func ProduceUndecodable(t testing.TB, brokers []string, topic, key string, seq int64) *kgo.Record {
	t.Helper()
	header, err := wire.EncodeHeader(wire.Header{Kind: wire.Append, From: seq, To: seq, PayloadType: wire.Binary})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte{1, 2, 3}, Headers: []kgo.RecordHeader{{Key: wire.HeaderKey, Value: header}}}
	if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return r
}
