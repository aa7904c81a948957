package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteTopics deletes the topics of the cluster at brokers whose names
// begin with prefix (a scratch store's, a test's), with the franz-go
// options opts. An empty prefix is refused with ErrInvalidConfig; topics
// already gone are not an error.
func DeleteTopics(ctx context.Context, brokers []string, prefix string, opts ...kgo.Opt) error {
	if prefix == "" {
		return fmt.Errorf("%w: deleting topics needs a prefix", ErrInvalidConfig)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	defer cl.Close()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka journal: listing topics: %w", err)
	}
	req := kmsg.NewPtrDeleteTopicsRequest()
	for _, t := range meta.Topics {
		if t.Topic != nil && strings.HasPrefix(*t.Topic, prefix) {
			req.TopicNames = append(req.TopicNames, *t.Topic)
			dt := kmsg.NewDeleteTopicsRequestTopic()
			dt.Topic = t.Topic
			req.Topics = append(req.Topics, dt)
		}
	}
	if len(req.Topics) == 0 {
		return nil
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafka journal: deleting topics %s*: %w", prefix, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			return fmt.Errorf("kafka journal: deleting topic %s: %w", name, err)
		}
	}
	return nil
}
