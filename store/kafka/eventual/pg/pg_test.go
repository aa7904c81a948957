package pg_test

import (
	"testing"

	"github.com/annals-go/annals/store/kafka/eventual/eventualtest"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
)

// TestReplicatesAsScala: after replicating the records the Scala Kafka
// Journal wrote, every head, event and pointer read back equals the rows
// the Scala replicator wrote into Cassandra.
func TestReplicatesAsScala(t *testing.T) {
	s := pgeventualtest.Open(t)
	eventualtest.ReplicateScalaWritten(t, s)
	eventualtest.CompareWithScala(t, s)
}
