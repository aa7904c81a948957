package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/wire"
)

// verifyKafka is what verify read of a Kafka journal's topics.
type verifyKafka struct {
	Topics     []string          `json:"topics"`
	Partitions []verifyPartition `json:"partitions"`
}

// verifyPartition is one partition's replication: kafka.PartitionLag
// for people and scripts.
type verifyPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Pointer is the last offset the eventual store applied; null when
	// none.
	Pointer     *int64 `json:"pointer"`
	Start       int64  `json:"start"`
	End         int64  `json:"end"`
	Behind      int64  `json:"behind"`
	Lost        int64  `json:"lost"`
	Records     int64  `json:"records"`
	Appends     int64  `json:"appends"`
	Events      int64  `json:"events"`
	Marks       int64  `json:"marks"`
	Undecodable int64  `json:"undecodable"`
	IDs         int    `json:"ids"`
}

// kafkaHeads reads the unreplicated heads of the journal's topics (the
// entity type's, or every topic starting with the URL's topic prefix and
// the prefix's own topic for ids without a type): each partition's lag
// in res.Kafka, its undecodable records and lost offsets as problems. It
// returns the ids with actions in the heads (of entityType when given),
// ascending.
func kafkaHeads(ctx context.Context, j *kafka.Journal, u stores.KafkaURL, entityType string, res *verifyResult) ([]string, error) {
	var topics []string
	if entityType != "" {
		topics = []string{u.Topic(entityType)}
	} else {
		var err error
		topics, err = j.Topics(ctx, func(t string) bool { return strings.HasPrefix(t, u.TopicPrefix) || t == u.Topic("") })
		if err != nil {
			return nil, err
		}
	}
	res.Kafka = &verifyKafka{Topics: []string{}, Partitions: []verifyPartition{}}
	ids := map[string]bool{}
	for _, topic := range topics {
		lags, err := j.Lag(ctx, topic)
		if err != nil {
			return nil, err
		}
		if len(lags) > 0 {
			res.Kafka.Topics = append(res.Kafka.Topics, topic)
		}
		for _, l := range lags {
			p := verifyPartition{Topic: l.Topic, Partition: l.Partition, Start: l.Start, End: l.End, Behind: l.Behind, Lost: l.Lost,
				Records: l.Records, Appends: l.Appends, Events: l.Events, Marks: l.Marks, Undecodable: int64(len(l.Undecodable)), IDs: len(l.IDs)}
			if l.Pointer >= 0 {
				p.Pointer = &l.Pointer
			}
			res.Kafka.Partitions = append(res.Kafka.Partitions, p)
			if l.Lost > 0 {
				res.Problems = append(res.Problems, verifyProblem{Problem: fmt.Sprintf("%s/%d: offsets %d..%d were deleted from Kafka before the eventual store applied them: their actions are lost",
					l.Topic, l.Partition, l.Pointer+1, l.Start-1)})
			}
			for _, u := range l.Undecodable {
				cause := u.Err
				var re *wire.RecordError
				if errors.As(u.Err, &re) {
					cause = re.Err
				}
				res.Problems = append(res.Problems, verifyProblem{PersistenceID: u.ID, Problem: fmt.Sprintf("the record at %s/%d offset %d does not decode (the replicator stops the partition there; annals skip-record moves past it once reviewed): %v",
					l.Topic, l.Partition, u.Offset, cause)})
			}
			for _, id := range l.IDs {
				if entityType == "" || annals.EntityType(id) == entityType {
					ids[id] = true
				}
			}
		}
	}
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// replicationText sums up the partitions' replication for the table.
func (k *verifyKafka) replicationText() string {
	var behind, lost, records int64
	lagging := 0
	for _, p := range k.Partitions {
		if p.Behind > 0 || p.Lost > 0 {
			lagging++
		}
		behind, lost, records = behind+p.Behind, lost+p.Lost, records+p.Records
	}
	s := fmt.Sprintf("%s, %s: ", counted(int64(len(k.Topics)), "topic"), counted(int64(len(k.Partitions)), "partition"))
	if lagging == 0 {
		return s + "all replicated"
	}
	s += fmt.Sprintf("%s behind by %s offsets (%s records, read from Kafka)", num(int64(lagging)), num(behind), num(records))
	if lost > 0 {
		s += fmt.Sprintf(", %s offsets lost", num(lost))
	}
	return s
}

// text is one lagging partition for the table.
func (p verifyPartition) text() string {
	pointer := "nothing applied"
	if p.Pointer != nil {
		pointer = fmt.Sprintf("applied to offset %d", *p.Pointer)
	}
	return fmt.Sprintf("%s/%d: %s, end %d: %s offsets behind, %s records (%s appends of %s events, %s marks, %s undecodable), %s ids",
		p.Topic, p.Partition, pointer, p.End, num(p.Behind), num(p.Records), num(p.Appends), num(p.Events), num(p.Marks), num(p.Undecodable), num(int64(p.IDs)))
}

// counted is n and a noun, plural unless n is 1: "1 topic", "3 topics".
func counted(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return num(n) + " " + noun + "s"
}
