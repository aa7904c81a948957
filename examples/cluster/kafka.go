package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual/pg"
	"github.com/annals-go/annals/store/postgres"
)

// openKafka opens the Kafka journal of
// kafka://HOST:PORT[,HOST:PORT…]/?topic_prefix=PREFIX&eventual=postgres://…
// (eventual= last): its topics on those brokers, its eventual store and
// snapshots in that PostgreSQL database (created if missing). A replicator
// (annals replicate) copies the topics into the eventual store; without
// one, reads take the events from the topics.
func openKafka(ctx context.Context, u string) (stores, error) {
	rest, _ := strings.CutPrefix(u, "kafka://")
	head, eventualURL, found := strings.Cut(rest, "eventual=")
	hosts, params, _ := strings.Cut(head, "?")
	hosts = strings.TrimRight(hosts, "/")
	if !found || hosts == "" || !strings.HasPrefix(eventualURL, "postgres") {
		return stores{}, fmt.Errorf("-store %q: want kafka://HOST:PORT/?eventual=postgres://… (eventual= last)", u)
	}
	q, err := url.ParseQuery(strings.TrimRight(params, "&"))
	if err != nil {
		return stores{}, fmt.Errorf("-store %q: %w", u, err)
	}
	prefix := kafka.DefaultTopicPrefix
	if q.Has("topic_prefix") {
		prefix = q.Get("topic_prefix")
	}
	pgs, err := postgres.Open(ctx, eventualURL)
	if err != nil {
		return stores{}, err
	}
	tables, err := pg.New(ctx, pgs.Pool(), pgs.Schema(), true)
	if err != nil {
		pgs.Close()
		return stores{}, err
	}
	j, err := kafka.Open(ctx, strings.Split(hosts, ","), tables,
		kafka.WithTopic(func(entityType string) string { return prefix + entityType }), kafka.WithSnapshots(pgs.Snapshots()))
	if err != nil {
		pgs.Close()
		return stores{}, err
	}
	return stores{journal: j, snapshots: pgs.Snapshots(), kafka: j, close: func() error { return errors.Join(j.Close(), pgs.Close()) }}, nil
}
