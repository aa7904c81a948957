package console

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// kafkaBrokers is the real broker when it answers (or ANNALS_TEST_REQUIRE
// lists kafka), else an in-process kfake cluster.
func kafkaBrokers(t *testing.T) []string {
	addr := kafkatest.DefaultAddress
	if conn, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		conn.Close()
		return kafkatest.Real(t)
	}
	if kafkatest.Required() {
		return kafkatest.Real(t)
	}
	t.Logf("no Kafka at %s: on kfake", addr)
	return kafkatest.Fake(t)
}

type kafkaAPI struct {
	Topics     []string `json:"topics"`
	Partitions []struct {
		Topic   string `json:"topic"`
		Pointer *int64 `json:"replicated_offset"`
		End     int64  `json:"end"`
		Behind  int64  `json:"behind"`
		Events  int64  `json:"events"`
	} `json:"partitions"`
	Behind int64 `json:"behind"`
}

// TestKafkaPage: on the Kafka journal (PostgreSQL as its eventual store),
// the Kafka page lists each partition of the journal's topics with the
// offset the eventual store applied beside the partition's end: nothing
// applied and every event behind before a replicator runs; the pointer at
// the end's last offset, nothing behind, once one has copied them.
func TestKafkaPage(t *testing.T) {
	t.Parallel()
	brokers := kafkaBrokers(t)
	dsn, _ := pgtest.Schema(t)
	prefix := kafkatest.Prefix(t, brokers, "console")
	url := "kafka://" + strings.Join(brokers, ",") + "/?topic_prefix=" + prefix + "&eventual=" + dsn
	s := openStore(t, url)
	_, hs := newServer(t, s, url, nil)

	var d kafkaAPI
	getJSON(t, hs.URL+"/api/kafka", &d)
	if strings.Join(d.Topics, " ") != prefix+"Account "+prefix+"Order" {
		t.Fatalf("topics %v, want %sAccount and %sOrder", d.Topics, prefix, prefix)
	}
	var events int64
	for _, p := range d.Partitions {
		if p.Pointer != nil || p.Behind != p.End {
			t.Errorf("before replication: %+v", p)
		}
		events += p.Events
	}
	if want := int64(3 + 1 + 3 + manyEvents + 1); events != want {
		t.Errorf("events in the heads: %d, want %d", events, want)
	}
	code, body, _ := get(t, nil, hs.URL+"/kafka")
	if code != http.StatusOK || !strings.Contains(body, "none applied") || !regexp.MustCompile(`partition\(s\) behind by [0-9,]+ offset`).MatchString(body) || !strings.Contains(body, `href="/kafka" class="here"`) {
		t.Errorf("kafka page before replication: %d\n%s", code, body)
	}

	j := s.Journal.(*kafka.Journal)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := kafka.NewReplicator(j.Brokers(), j.Eventual(), kafka.WithGroup(prefix+"replicator"), kafka.WithTopicPattern("^"+regexp.QuoteMeta(prefix)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(90 * time.Second)
	for {
		getJSON(t, hs.URL+"/api/kafka", &d)
		caught := d.Behind == 0
		for _, p := range d.Partitions {
			if p.End > 0 && (p.Pointer == nil || *p.Pointer != p.End-1) {
				caught = false
			}
		}
		if caught {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicator did not catch up: %+v", d)
		}
		time.Sleep(300 * time.Millisecond)
	}
	code, body, _ = get(t, nil, hs.URL+"/kafka")
	if code != http.StatusOK || !strings.Contains(body, "all replicated") {
		t.Errorf("kafka page after replication: %d\n%s", code, body)
	}
}

// TestTagsPage: on Cassandra, the Tags page reads tag_write_progress and
// tag_scanning: per tag the ids and tag_views rows written and the newest
// write.
func TestTagsPage(t *testing.T) {
	t.Parallel()
	url, _ := cassandratest.URL(t)
	s := openStore(t, url)
	_, hs := newServer(t, s, url, nil)
	var d struct {
		Tags []struct {
			Tag    string    `json:"tag"`
			IDs    int64     `json:"ids"`
			Rows   int64     `json:"tag_views_rows"`
			Newest time.Time `json:"newest_write"`
		} `json:"tags"`
		ProgressRows int64 `json:"progress_rows"`
		Complete     bool  `json:"complete"`
	}
	getJSON(t, hs.URL+"/api/tags", &d)
	// fill tags Account|a-1's three events "bank", Order|o-1's one "orders".
	if len(d.Tags) != 2 || d.ProgressRows != 2 || !d.Complete {
		t.Fatalf("tags: %+v", d)
	}
	for i, want := range []struct {
		tag       string
		ids, rows int64
	}{{"bank", 1, 3}, {"orders", 1, 1}} {
		got := d.Tags[i]
		if got.Tag != want.tag || got.IDs != want.ids || got.Rows != want.rows || time.Since(got.Newest) > time.Hour || got.Newest.After(time.Now().Add(time.Minute)) {
			t.Errorf("tag %d: %+v, want %+v written just now", i, got, want)
		}
	}
	code, body, _ := get(t, nil, hs.URL+"/tags")
	if code != http.StatusOK || !strings.Contains(body, `<td>bank</td>`) || !strings.Contains(body, `href="/tags" class="here"`) {
		t.Errorf("tags page: %d\n%s", code, body)
	}
}

// TestInternalsNotApplicable: the Kafka and Tags pages say, on other
// stores, that they do not apply; the navigation does not offer them.
func TestInternalsNotApplicable(t *testing.T) {
	t.Parallel()
	s := openStore(t, "memory:")
	_, hs := newServer(t, s, "memory:", nil)
	for _, c := range []struct{ path, want string }{
		{"/api/kafka", "is not the Kafka journal"}, {"/kafka", "is not the Kafka journal"},
		{"/api/tags", "keeps no tag progress"}, {"/tags", "keeps no tag progress"},
	} {
		code, body, _ := get(t, nil, hs.URL+c.path)
		if code != http.StatusNotImplemented || !strings.Contains(body, "does not apply") || !strings.Contains(body, c.want) {
			t.Errorf("%s on memory: %d %s", c.path, code, body)
		}
	}
	if _, body, _ := get(t, nil, hs.URL+"/"); strings.Contains(body, `href="/kafka"`) || strings.Contains(body, `href="/tags"`) {
		t.Errorf("the overview of memory offers the Kafka or Tags page")
	}
}
