package stores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual/cql"
	"github.com/annals-go/annals/store/kafka/eventual/pg"
)

// Kafka is the scheme of "kafka://" URLs: the Kafka journal
// (store/kafka), as kafka://HOST:PORT[,HOST:PORT...]/?[topic_prefix=P&]eventual=URL,
// where URL, the rest of the text after "eventual=", is the eventual
// store's database: a cassandra:// or postgres:// store URL, and
// topic_prefix (default "journal-") starts each entity type's topic. The journal's
// eventual tables (the Scala replicator's) live in that keyspace or
// schema, and so do the snapshots (that store's own snapshot tables).
// Its Admin is the *kafka.Journal (admin.Purger); its stores keep no
// projection offsets. It is opened by stacks.Open; the given schemes
// migrate and make scratch copies of the eventual store.
func Kafka(cassandraScheme, postgresScheme Scheme) Scheme {
	k := kafkaScheme{byKind: map[string]Scheme{"cassandra": cassandraScheme, "postgres": postgresScheme, "postgresql": postgresScheme}}
	return Scheme{Open: openStack, Migrator: k.migrator, Scratch: k.scratch}
}

type kafkaScheme struct {
	byKind map[string]Scheme
}

// inner returns the scheme of the eventual store's URL.
func (k kafkaScheme) inner(u string) (KafkaURL, string, Scheme, error) {
	p, err := ParseKafkaURL(u)
	if err != nil {
		return KafkaURL{}, "", Scheme{}, err
	}
	kind, _, _ := strings.Cut(p.Eventual, ":")
	s, ok := k.byKind[strings.ToLower(kind)]
	if !ok {
		return KafkaURL{}, "", Scheme{}, BadURL(fmt.Errorf("kafka URL %q: the eventual store must be cassandra:// or postgres://, not %q", Redact(u), Redact(p.Eventual)))
	}
	return p, strings.ToLower(kind), s, nil
}

// migrator migrates the eventual store's database, then creates the
// Kafka journal's tables in it.
func (k kafkaScheme) migrator(ctx context.Context, u string) (admin.Migrator, error) {
	p, kind, scheme, err := k.inner(u)
	if err != nil {
		return nil, err
	}
	m, err := scheme.Migrator(ctx, p.Eventual)
	if err != nil {
		return nil, err
	}
	return &kafkaMigrator{Migrator: m, open: func(ctx context.Context) error {
		s, err := openStack(ctx, u, Create)
		if err != nil {
			return err
		}
		return s.Close()
	}, kind: kind, where: p.Eventual}, nil
}

type kafkaMigrator struct {
	admin.Migrator
	open  func(ctx context.Context) error
	kind  string
	where string
}

// PendingMigrations adds the Kafka journal's tables (created if missing)
// to the eventual store's own steps.
func (m *kafkaMigrator) PendingMigrations(ctx context.Context) ([]admin.Migration, error) {
	steps, err := m.Migrator.PendingMigrations(ctx)
	if err != nil {
		return nil, err
	}
	var stmts []string
	if m.kind == "cassandra" {
		stmts = cql.Schema("<keyspace>")
	} else {
		stmts = pg.Schema("<schema>")
	}
	_, latest, err := m.Migrator.SchemaVersion(ctx)
	if err != nil {
		return nil, err
	}
	return append(steps, admin.Migration{From: latest, To: latest,
		SQL: "-- the Kafka journal's eventual tables, where missing\n" + strings.Join(stmts, ";\n") + ";"}), nil
}

// Migrate runs the eventual store's steps, then creates the Kafka
// journal's tables where missing.
func (m *kafkaMigrator) Migrate(ctx context.Context) ([]admin.Migration, error) {
	steps, err := m.Migrator.Migrate(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.open(ctx); err != nil {
		return nil, err
	}
	return steps, nil
}

// Close closes the eventual store's migrator when it has a Close.
func (m *kafkaMigrator) Close() error { return closeMigrator(m.Migrator) }

// scratch is a scratch eventual store beside the one in the URL; the
// topics are the journal's default ones (bench ids are its own).
func (k kafkaScheme) scratch(ctx context.Context, u string) (string, func() error, error) {
	p, _, scheme, err := k.inner(u)
	if err != nil {
		return "", nil, err
	}
	inner, removeInner, err := scheme.Scratch(ctx, p.Eventual)
	if err != nil {
		return "", nil, err
	}
	// Topics of the scratch store's own: an eventual store of its own
	// beside topics another journal wrote would read their records.
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "annals-scratch-" + hex.EncodeToString(b[:]) + "-"
	remove := func() error {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return errors.Join(kafka.DeleteTopics(dctx, p.Brokers, prefix, p.ClientOptions...), removeInner())
	}
	return p.With(prefix, inner), remove, nil
}
