package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/kafka"
)

// kafkaJournal opens a kafka:// store and returns its journal.
func kafkaJournal(e *env, store string) (*stores.Store, *kafka.Journal, error) {
	s, err := e.open(store, stores.Existing)
	if err != nil {
		return nil, nil, err
	}
	j, ok := s.Journal.(*kafka.Journal)
	if !ok {
		s.Close()
		return nil, nil, usagef("%s is a %s store; replication is for the Kafka journal (kafka://HOST:PORT/?eventual=URL)", s.Where, s.Kind)
	}
	return s, j, nil
}

func replicateCommand() *command {
	return &command{
		name: "replicate", summary: "copy a Kafka journal's topics into its eventual store, until Ctrl-C",
		help: `Runs the Kafka journal's replicator: a member of a consumer group (--group)
reading the journal topics (--topics, a regular expression), applying each
partition's actions in order to the eventual store in the URL (Cassandra or
PostgreSQL, in the Scala Kafka Journal's layout) and moving the partition's
pointer after them. Run one or more per cluster; they share the partitions.
Stops at Ctrl-C, leaving the group (exit code 130, as for every command an
interrupt ends).

A record it cannot decode stops that partition (others go on) with an error
naming topic, partition and offset; after reviewing the record, skip it with
annals skip-record and start the replicator again.`,
		examples: []string{
			"annals replicate --store 'kafka://127.0.0.1:9092/?eventual=cassandra://127.0.0.1:9042/journal'",
			"annals replicate --store 'kafka://127.0.0.1:9092/?eventual=postgres://postgres@127.0.0.1/annals?schema=kafka' --topics '^journal-Account$'",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store := storeFlag(fs)
			group := fs.String("group", kafka.DefaultGroup, "the consumer groups' `PREFIX` (each topic has its own group, PREFIX-TOPIC)")
			topics := fs.String("topics", "", "the topics to replicate, a regular expression `RE` (default: those starting with the URL's topic prefix)")
			verbose := fs.Bool("verbose", false, "print a line for every poll replicated")
			return func(e *env, _ []string) error {
				s, j, err := kafkaJournal(e, *store)
				if err != nil {
					return err
				}
				defer s.Close()
				if *topics == "" {
					u, _ := e.storeURL(*store)
					p, err := stores.ParseKafkaURL(u)
					if err != nil {
						return err
					}
					*topics = "^" + regexp.QuoteMeta(p.TopicPrefix)
				}
				r, err := kafka.NewReplicator(j.Brokers(), j.Eventual(), kafka.WithGroup(*group), kafka.WithTopicPattern(*topics),
					kafka.WithReplicatorClientOptions(j.ClientOptions()...),
					kafka.WithErrorHandler(func(err error) { fmt.Fprintf(e.stderr, "annals replicate: %v\n", err) }),
					kafka.WithOnReplicated(func(topic string, partition int32, offset int64) {
						if *verbose {
							fmt.Fprintf(e.stderr, "annals replicate: replicated %s/%d up to offset %d\n", topic, partition, offset)
						}
					}))
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stderr, "annals replicate: %s, topics %s, group %s (Ctrl-C stops)\n", s.Where, *topics, *group)
				if err := r.Run(e.ctx); err != nil {
					return err
				}
				if stopped := r.Stopped(); len(stopped) > 0 {
					return errors.Join(stopped...)
				}
				return nil
			}
		},
	}
}

func skipRecordCommand() *command {
	return &command{
		name: "skip-record", args: "TOPIC PARTITION OFFSET", summary: "move a Kafka journal's replication past a record it cannot decode",
		help: `Moves the replication pointer of a topic's partition past the record at
OFFSET, which must be the next record to replicate (the one a stopped
partition names). Stop the replicator first; started again, it resumes after
the record. The record stays in Kafka; its actions are never applied.
` + deleteSafety,
		examples: []string{
			"annals skip-record --store 'kafka://127.0.0.1:9092/?eventual=cassandra://127.0.0.1:9042/journal' journal-Account 3 1042",
		},
		minArgs: 3, maxArgs: 3,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store := storeFlag(fs)
			yes := fs.Bool("yes", false, "skip without asking")
			dry := fs.Bool("dry-run", false, "check and show what would happen; change nothing")
			return func(e *env, args []string) error {
				partition, err := strconv.ParseInt(args[1], 10, 32)
				if err != nil || partition < 0 {
					return usagef("PARTITION %q: want a partition number", args[1])
				}
				offset, err := strconv.ParseInt(args[2], 10, 64)
				if err != nil || offset < 0 {
					return usagef("OFFSET %q: want an offset", args[2])
				}
				s, j, err := kafkaJournal(e, *store)
				if err != nil {
					return err
				}
				defer s.Close()
				p, ok, err := j.Eventual().Pointer(e.ctx, args[0], int32(partition))
				if err != nil {
					return err
				}
				if ok && p != offset-1 {
					return usagef("%s/%d is replicated up to offset %d: only the next record, at offset %d, can be skipped", args[0], partition, p, p+1)
				}
				what := fmt.Sprintf("skip the record at %s/%d offset %d (its actions will never be applied) in %s", args[0], partition, offset, s.Where)
				if *dry {
					fmt.Fprintf(e.stdout, "would %s\n", what)
					return nil
				}
				if err := e.confirm(what+"?", *yes); err != nil {
					return err
				}
				if err := kafka.SkipRecord(e.ctx, j.Eventual(), args[0], int32(partition), offset); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "skipped %s/%d offset %d; start the replicator again\n", args[0], partition, offset)
				return nil
			}
		},
	}
}

func purgeExpiredCommand() *command {
	return &command{
		name: "purge-expired", summary: "purge the Kafka journals whose expiry date has come, through the log",
		help: `Produces a Purge action for each journal of a Kafka journal whose expiry
date (its last append plus the expire-after its appends carry) is today or
earlier; the replicator then removes it, and the id's next append starts
at 1. A journal appended to since the eventual store recorded its expiry is
left alone. Run it daily.
` + deleteSafety,
		examples: []string{
			"annals purge-expired --store 'kafka://127.0.0.1:9092/?eventual=cassandra://127.0.0.1:9042/journal' --yes",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store := storeFlag(fs)
			yes := fs.Bool("yes", false, "purge without asking")
			return func(e *env, _ []string) error {
				s, j, err := kafkaJournal(e, *store)
				if err != nil {
					return err
				}
				defer s.Close()
				if err := e.confirm(fmt.Sprintf("purge every expired journal of %s?", s.Where), *yes); err != nil {
					return err
				}
				purged, err := j.PurgeExpired(e.ctx, time.Now())
				for _, id := range purged {
					fmt.Fprintf(e.stdout, "purged %s\n", id)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "%d expired journals purged\n", len(purged))
				return nil
			}
		},
	}
}
