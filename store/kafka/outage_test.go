package kafka_test

import (
	"os"
	"testing"
	"time"

	"github.com/annals-go/annals/internal/outagetest"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestOutageDrill runs the outage drill (package internal/outagetest) on
// the Kafka journal, its eventual store and snapshots in PostgreSQL (the
// server of ANNALS_TEST_POSTGRES, which stays up) and its replicator
// running in this process: the broker of scripts/services
// is stopped for 15 s while 32 callers deposit into 200 accounts, then
// started again, and writes must resume in this same process. It stops
// the broker ANNALS_SERVICES_DIR names, which must be set, so it runs only
// when asked, on a broker of its own:
//
//	export ANNALS_SERVICES_DIR=/tmp/drill
//	scripts/services up kafka && eval "$(scripts/services env kafka)"
//	ANNALS_OUTAGE_DRILL=1 go test ./store/kafka -run TestOutageDrill -v
//	scripts/services down kafka
func TestOutageDrill(t *testing.T) {
	if os.Getenv("ANNALS_OUTAGE_DRILL") == "" {
		t.Skip("stops the Kafka broker: set ANNALS_OUTAGE_DRILL=1 and run it alone, on a broker of its own (see the comment)")
	}
	if os.Getenv("ANNALS_SERVICES_DIR") == "" {
		t.Fatal("ANNALS_OUTAGE_DRILL: set ANNALS_SERVICES_DIR to the folder of a broker of the drill's own (scripts/services up kafka with it), never the shared broker's")
	}
	brokers := kafkatest.Real(t)
	tables, snaps := eventualWithSnapshots(t)
	run := kafkatest.Prefix(t, brokers, "drill")
	j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(et string) string { return run + et }), kafka.WithSnapshots(snaps))
	replicate(t, brokers, tables, kafka.WithTopicPattern("^"+run), kafka.WithGroup(run), kafka.WithTopicDiscovery(time.Second))
	outagetest.Run(t, outagetest.Config{
		Journal:   j,
		Snapshots: snaps,
		Services:  outagetest.Services(t, "../../scripts/services", "kafka"),
		Probe:     outagetest.WriteProbe(j),
	})
}
