// Package kafkatest gives tests Kafka brokers: franz-go's in-process fake
// (kfake) for fast tests, and the real broker `scripts/services up kafka`
// starts (ANNALS_TEST_KAFKA, default 127.0.0.1:9092). When the real broker
// does not answer, tests that need it skip with a message saying how to
// start one, except when ANNALS_TEST_REQUIRE lists "kafka" (as CI sets it):
// then they fail.
package kafkatest

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
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
