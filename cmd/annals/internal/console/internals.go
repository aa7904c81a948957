package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/kafka"
)

// lagTimeout bounds the reading of the Kafka journal's unreplicated heads.
const lagTimeout = 20 * time.Second

// ---------------------------------------------------------------- kafka

type kafkaPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Pointer is the last offset the eventual store applied; null when
	// none.
	Pointer     *int64 `json:"replicated_offset"`
	Start       int64  `json:"start"`
	End         int64  `json:"end"`
	Behind      int64  `json:"behind"`
	Lost        int64  `json:"lost"`
	Records     int64  `json:"records"`
	Appends     int64  `json:"appends"`
	Events      int64  `json:"events"`
	Marks       int64  `json:"marks"`
	Undecodable int    `json:"undecodable"`
	IDs         int    `json:"ids"`
}

type kafkaData struct {
	Topics     []string         `json:"topics"`
	Partitions []kafkaPartition `json:"partitions"`
	Behind     int64            `json:"behind"`
	Lost       int64            `json:"lost"`
	Lagging    int              `json:"lagging_partitions"`
	Note       string           `json:"note"`
}

// kafkaPage shows, per partition of the journal's topics, the offset the
// eventual store has applied beside the partition's end, and what the
// replicator has still to apply (kafka.Journal.Lag, as annals verify
// reads it).
func (s *Server) kafkaPage(r *http.Request) (any, error) {
	j, ok := s.st.Journal.(*kafka.Journal)
	if !ok {
		return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("this page does not apply: the %s store is not the Kafka journal, and has no topics to replicate", s.st.Kind)}
	}
	u, err := stores.ParseKafkaURL(s.opt.URL)
	if err != nil {
		return nil, fmt.Errorf("the console was given no kafka:// URL to find the journal's topics: %w", err)
	}
	ctx, cancel := context.WithTimeout(r.Context(), lagTimeout)
	defer cancel()
	topics, err := j.Topics(ctx, func(t string) bool { return strings.HasPrefix(t, u.TopicPrefix) || t == u.Topic("") })
	if err != nil {
		return nil, err
	}
	d := kafkaData{Topics: []string{}, Partitions: []kafkaPartition{},
		Note: "The replicated offset is the eventual store's pointer: the last offset of the partition it applied. Behind counts the offsets from the next one to the partition's end; the head's records are read from Kafka as the replicator decodes them."}
	for _, topic := range topics {
		lags, err := j.Lag(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("the lag of %s: %w", topic, err)
		}
		if len(lags) > 0 {
			d.Topics = append(d.Topics, topic)
		}
		for _, l := range lags {
			p := kafkaPartition{Topic: l.Topic, Partition: l.Partition, Start: l.Start, End: l.End, Behind: l.Behind, Lost: l.Lost,
				Records: l.Records, Appends: l.Appends, Events: l.Events, Marks: l.Marks, Undecodable: len(l.Undecodable), IDs: len(l.IDs)}
			if l.Pointer >= 0 {
				ptr := l.Pointer
				p.Pointer = &ptr
			}
			d.Partitions = append(d.Partitions, p)
			d.Behind += l.Behind
			d.Lost += l.Lost
			if l.Behind > 0 || l.Lost > 0 {
				d.Lagging++
			}
		}
	}
	return d, nil
}

// ---------------------------------------------------------------- cassandra tags

// cassandraSession is what the Cassandra store offers to read its tables.
type cassandraSession interface {
	Session() *gocql.Session
	Keyspace() string
}

// maxProgressRows bounds the tag_write_progress rows the tags page reads.
const maxProgressRows = 200_000

type tagRow struct {
	Tag string `json:"tag"`
	// IDs have rows of the tag written; Rows is the sum of their
	// tag_pid_sequence_nr, the tag_views rows written; Newest the time of
	// the last row written.
	IDs    int64     `json:"ids"`
	Rows   int64     `json:"tag_views_rows"`
	Newest time.Time `json:"newest_write,omitzero"`
}

type tagsData struct {
	Tags []tagRow `json:"tags"`
	// ProgressRows is how many (id, tag) rows were read; Complete whether
	// that is all of them.
	ProgressRows int64 `json:"progress_rows"`
	Complete     bool  `json:"complete"`
	// Scanned counts the ids with a tag_scanning mark, and Unscanned the
	// ids with progress whose mark is below their highest event written
	// to a tag view (the next recovery checks the events after it).
	Scanned   int64  `json:"ids_scanned"`
	Unscanned int64  `json:"ids_below_progress"`
	Note      string `json:"note"`
}

// tagsPage reads the Cassandra store's tag progress tables
// (tag_write_progress, tag_scanning, as akka-persistence-cassandra keeps
// them) through its session: per tag, the ids and tag_views rows written
// and the newest write.
func (s *Server) tagsPage(r *http.Request) (any, error) {
	cs, ok := s.st.Admin.(cassandraSession)
	if s.st.Kind != "cassandra" || !ok {
		return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("this page does not apply: the %s store keeps no tag progress (tag_write_progress is the Cassandra store's)", s.st.Kind)}
	}
	ctx, cancel := context.WithTimeout(r.Context(), countTimeout)
	defer cancel()
	ks := cs.Keyspace()
	d := tagsData{Tags: []tagRow{}, Complete: true,
		Note: "Read from tag_write_progress, which records per id and tag the last event written to tag_views, and tag_scanning, each id's mark up to which its tag rows are known stored (moved by recoveries, and by the writing process every 30 s and when it closes). The store offers no per-tag index of them, so the console reads the tables (at most " + num(maxProgressRows) + " rows)."}
	byTag := map[string]*tagRow{}
	progress := map[string]int64{}
	it := cs.Session().Query(`SELECT persistence_id, tag, sequence_nr, tag_pid_sequence_nr, offset FROM ` + ks + `.tag_write_progress`).WithContext(ctx).PageSize(5000).Iter()
	var pid, tag string
	var seq, tagSeq int64
	var off gocql.UUID
	for it.Scan(&pid, &tag, &seq, &tagSeq, &off) {
		if d.ProgressRows >= maxProgressRows {
			d.Complete = false
			break
		}
		d.ProgressRows++
		t := byTag[tag]
		if t == nil {
			t = &tagRow{Tag: tag}
			byTag[tag] = t
		}
		t.IDs++
		t.Rows += tagSeq
		if at := off.Time().UTC(); at.After(t.Newest) {
			t.Newest = at
		}
		progress[pid] = max(progress[pid], seq)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("reading %s.tag_write_progress: %w", ks, err)
	}
	if d.Complete {
		it = cs.Session().Query(`SELECT persistence_id, sequence_nr FROM ` + ks + `.tag_scanning`).WithContext(ctx).PageSize(5000).Iter()
		marks := map[string]int64{}
		for it.Scan(&pid, &seq) {
			d.Scanned++
			marks[pid] = seq
			if d.Scanned >= maxProgressRows {
				break
			}
		}
		if err := it.Close(); err != nil {
			return nil, fmt.Errorf("reading %s.tag_scanning: %w", ks, err)
		}
		for id, hi := range progress {
			if marks[id] < hi {
				d.Unscanned++
			}
		}
	}
	for _, t := range byTag {
		d.Tags = append(d.Tags, *t)
	}
	slices.SortFunc(d.Tags, func(a, b tagRow) int { return strings.Compare(a.Tag, b.Tag) })
	return d, nil
}
