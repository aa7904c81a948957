package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
)

// noPointers is an eventual store with no pointers, which signals each
// read of one (the replicator reads them when partitions are assigned);
// nothing else of it may be used (the nil interface's methods panic).
type noPointers struct {
	eventual.Tables
	read chan struct{}
}

func (n noPointers) Pointer(context.Context, string, int32) (int64, bool, error) {
	select {
	case n.read <- struct{}{}:
	default:
	}
	return 0, false, nil
}

// TestReplicatorErrorsNameTheTopic: when the broker goes away under a
// replicator that had joined its group (an in-process cluster, closed),
// the errors it reports name the topic its consumer fetches and the
// consumer group, not an empty topic ("fetching /0: unable to join group
// session").
func TestReplicatorErrorsNameTheTopic(t *testing.T) {
	t.Parallel()
	topic := fmt.Sprintf("journal-NoBroker%d", time.Now().UnixNano())
	group := fmt.Sprintf("annals-test-nobroker-%d", time.Now().UnixNano())
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	assigned := make(chan struct{}, 1)
	errs := make(chan error, 64)
	r, err := kafka.NewReplicator(c.ListenAddrs(), noPointers{read: assigned}, kafka.WithTopics(topic), kafka.WithGroup(group),
		kafka.WithReplicatorClientOptions(kgo.RequestRetries(0), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond })),
		kafka.WithErrorHandler(func(err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-assigned:
	case err := <-errs:
		t.Fatalf("before the broker went away: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the replicator was assigned no partition in two minutes")
	}
	c.Close() // the broker goes away
	var got error
	select {
	case got = <-errs:
	case err := <-done:
		t.Fatalf("the replicator ended without reporting an error: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the replicator reported no error in two minutes without its broker")
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("Run after cancel: %v", err)
	}
	msg := got.Error()
	if !strings.Contains(msg, topic) || !strings.Contains(msg, group+"-"+topic) || strings.Contains(msg, " /") {
		t.Errorf("the replicator's error %q does not name topic %s and group %s-%s", msg, topic, group, topic)
	}
	var ge *kgo.ErrGroupSession
	if !errors.As(got, &ge) {
		t.Errorf("the replicator's error %q does not wrap the client's *kgo.ErrGroupSession", msg)
	}
}
