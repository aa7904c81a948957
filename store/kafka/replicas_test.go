package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestWriteShortOfReplicas: franz-go's in-process broker answers every
// produce with NOT_ENOUGH_REPLICAS, which the producer retries. When the
// topic's min.insync.replicas is above its partition's replicas in sync
// (2, with one broker), the write fails long before its context ends,
// with an error wrapping kerr.NotEnoughReplicas that names the topic, the
// partition and the setting; when it is not (1: nothing explains the
// refusals), the write waits for the broker until its context ends, as
// any write the broker does not acknowledge.
func TestWriteShortOfReplicas(t *testing.T) {
	const wait = 10 * time.Second // the write's context: the refusal comes long before it
	for _, c := range []struct {
		minISR  string
		refused bool
	}{
		{"2", true},
		{"1", false},
	} {
		t.Run("min.insync.replicas="+c.minISR, func(t *testing.T) {
			kc, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(kc.Close)
			brokers := kc.ListenAddrs()
			topic := fmt.Sprintf("journal-Short%d", time.Now().UnixNano())
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			resp, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, map[string]*string{"min.insync.replicas": &c.minISR}, topic)
			if err == nil {
				err = resp.Err
			}
			if err != nil {
				t.Fatal(err)
			}
			kc.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				kc.KeepControl()
				preq := req.(*kmsg.ProduceRequest)
				presp := preq.ResponseKind().(*kmsg.ProduceResponse)
				presp.Version = preq.Version
				for _, rt := range preq.Topics {
					st := kmsg.NewProduceResponseTopic()
					st.Topic, st.TopicID = rt.Topic, rt.TopicID
					for _, rp := range rt.Partitions {
						sp := kmsg.NewProduceResponseTopicPartition()
						sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotEnoughReplicas.Code
						st.Partitions = append(st.Partitions, sp)
					}
					presp.Topics = append(presp.Topics, st)
				}
				return presp, nil, true
			})
			j := kafkatest.Open(t, brokers, eventualStores["postgres"](t), kafka.WithTopic(func(string) string { return topic }))
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			pid := "Short|a"
			_, err = j.Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte("x"), SerializerID: 4, Manifest: "m", WriterID: "w"}}}})
			waited := ctx.Err() != nil
			switch {
			case err == nil:
				t.Fatal("the write succeeded; every produce is refused")
			case c.refused && (!errors.Is(err, kerr.NotEnoughReplicas) || waited):
				t.Fatalf("err = %v (context ended: %v); want NOT_ENOUGH_REPLICAS before the context ends", err, waited)
			case !c.refused && (errors.Is(err, kerr.NotEnoughReplicas) || !waited):
				t.Fatalf("err = %v (context ended: %v); want the write to wait until its context ends", err, waited)
			}
			if c.refused {
				for _, want := range []string{topic, "partition 0", "min.insync.replicas of 2", "1 of its 1 replicas in sync"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the error %q does not say %q", err, want)
					}
				}
			}
			t.Log(err)
		})
	}
}
