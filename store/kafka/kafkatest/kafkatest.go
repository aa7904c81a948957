// Package kafkatest gives tests Kafka brokers: franz-go's in-process fake
// (kfake) for fast tests, and the real broker `scripts/services up kafka`
// starts (ANNALS_TEST_KAFKA, default 127.0.0.1:9092). When the real broker
// does not answer, tests that need it skip with a message saying how to
// start one, except when ANNALS_TEST_REQUIRE lists "kafka" (as CI sets it):
// then they fail.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
)

// DefaultAddress is the broker `scripts/services up kafka` starts.
const DefaultAddress = "127.0.0.1:9092"

// Partitions is the number of partitions of the topics tests create.
const Partitions = 3

// Fake starts an in-process Kafka-protocol cluster that creates topics
// (Partitions each) on first use, and stops it when the test ends.
func Fake(t testing.TB) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(Partitions))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// Required reports whether ANNALS_TEST_REQUIRE lists kafka.
func Required() bool {
	return slices.Contains(strings.FieldsFunc(os.Getenv("ANNALS_TEST_REQUIRE"), func(r rune) bool { return r == ',' || r == ' ' }), "kafka")
}

// Real returns the real broker's address after checking that it accepts
// connections; t is skipped, or failed when Required, when it does not.
func Real(t testing.TB) []string {
	t.Helper()
	addr := os.Getenv("ANNALS_TEST_KAFKA")
	if addr == "" {
		addr = DefaultAddress
	}
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		if Required() {
			t.Fatalf("Kafka at %s is required (ANNALS_TEST_REQUIRE) and does not answer: %v", addr, err)
		}
		t.Skipf("no Kafka at %s (%v): run `scripts/services up kafka`, or set ANNALS_TEST_KAFKA", addr, err)
	}
	conn.Close()
	return []string{addr}
}

// Prefix returns a topic and group name prefix unique to this call
// ("annals-<name>-<nanoseconds>-") and, when the test ends, deletes the
// topics and consumer groups on brokers whose names begin with it, so that
// a broker used by many runs does not accumulate partitions (each one
// slows the broker's start). Call it before opening what uses the names:
// cleanups run last in, first out, so the deletion follows their closing.
func Prefix(t testing.TB, brokers []string, name string) string {
	t.Helper()
	prefix := fmt.Sprintf("annals-%s-%d-", name, time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := deletePrefixed(ctx, brokers, prefix); err != nil {
			t.Errorf("deleting the test's topics and groups (%s*): %v", prefix, err)
		}
	})
	return prefix
}

// deletePrefixed deletes the topics and groups whose names begin with
// prefix.
func deletePrefixed(ctx context.Context, brokers []string, prefix string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()

	groups, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("listing groups: %w", err)
	}
	delGroups := kmsg.NewPtrDeleteGroupsRequest()
	for _, g := range groups.Groups {
		if strings.HasPrefix(g.Group, prefix) {
			delGroups.Groups = append(delGroups.Groups, g.Group)
		}
	}
	if len(delGroups.Groups) > 0 {
		resp, err := delGroups.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("deleting groups: %w", err)
		}
		for _, g := range resp.Groups {
			// A group a killed member has not left yet stays until the
			// broker's session timeout; the broker expires it later.
			if err := kerr.ErrorForCode(g.ErrorCode); err != nil && !errors.Is(err, kerr.NonEmptyGroup) && !errors.Is(err, kerr.GroupIDNotFound) {
				return fmt.Errorf("deleting group %s: %w", g.Group, err)
			}
		}
	}

	return kafka.DeleteTopics(ctx, brokers, prefix)
}

// CreateTopic creates topic on brokers with the given number of partitions
// (replication 1), failing t when the broker refuses it.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
}

// Open opens a journal on brokers with tables as its eventual store (origin
// "test"), closed when the test ends; t fails when it does not open within
// a minute.
func Open(t testing.TB, brokers []string, tables eventual.Tables, opts ...kafka.Option) *kafka.Journal {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j, err := kafka.Open(ctx, brokers, tables, append([]kafka.Option{kafka.WithOrigin("test")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// Claims returns a storetest.Store.Claim for j: each call makes a new
// claim, under domain, of the partition that the id's records go to
// (the id's topic is created with the broker's default partition count
// when missing), fencing off the earlier ones. The claims close when t
// ends.
func Claims(t testing.TB, j *kafka.Journal, domain string) func(ctx context.Context, persistenceID string) (journal.FenceToken, error) {
	var (
		mu     sync.Mutex
		claims []*kafka.Claim
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range claims {
			c.Close()
		}
	})
	return func(ctx context.Context, pid string) (journal.FenceToken, error) {
		topic, err := j.Topic(pid)
		if err != nil {
			return journal.FenceToken{}, err
		}
		partitions, err := partitionCount(ctx, j.Brokers(), topic)
		if err != nil {
			return journal.FenceToken{}, err
		}
		c, err := j.Claim(ctx, domain, topic, kafka.Partition(pid, partitions))
		if err != nil {
			return journal.FenceToken{}, err
		}
		mu.Lock()
		claims = append(claims, c)
		mu.Unlock()
		return c.Token(), nil
	}
}

// partitionCount returns the number of partitions of topic, creating it
// when missing.
func partitionCount(ctx context.Context, brokers []string, topic string) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	for {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = true
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return 0, err
		}
		if len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && len(resp.Topics[0].Partitions) > 0 {
			return len(resp.Topics[0].Partitions), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the partitions of %s: %w", topic, ctx.Err())
		case <-time.After(50 * time.Millisecond): // the topic is being created
		}
	}
}
