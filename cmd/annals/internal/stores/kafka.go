package stores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
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
// projection offsets.
func Kafka(cassandraScheme, postgresScheme Scheme) Scheme {
	k := kafkaScheme{byKind: map[string]Scheme{"cassandra": cassandraScheme, "postgres": postgresScheme, "postgresql": postgresScheme}}
	return Scheme{Open: k.open, Migrator: k.migrator, Scratch: k.scratch}
}

type kafkaScheme struct {
	byKind map[string]Scheme
}

// KafkaURL is a parsed kafka:// URL.
type KafkaURL struct {
	Brokers     []string
	TopicPrefix string
	Eventual    string
}

// Topic returns the topic of an entity type.
func (k KafkaURL) Topic(entityType string) string {
	if entityType == "" {
		return strings.TrimRight(k.TopicPrefix, "-._")
	}
	return k.TopicPrefix + entityType
}

// ParseKafkaURL reads kafka://HOST:PORT[,HOST:PORT...]/?eventual=URL;
// its errors match ErrBadURL.
func ParseKafkaURL(u string) (KafkaURL, error) {
	k, err := parseKafkaURL(u)
	return k, BadURL(err)
}

func parseKafkaURL(u string) (KafkaURL, error) {
	rest, ok := strings.CutPrefix(u, "kafka://")
	if !ok {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: want kafka://HOST:PORT/?eventual=cassandra://HOST:PORT/KEYSPACE (or postgres://…)", u)
	}
	head, eventualURL, found := strings.Cut(rest, "eventual=")
	hosts, params, _ := strings.Cut(head, "?")
	hosts = strings.TrimRight(hosts, "/")
	if !found || eventualURL == "" || hosts == "" {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: want brokers and an eventual store: kafka://HOST:PORT/?eventual=cassandra://HOST:PORT/KEYSPACE (or postgres://…)", u)
	}
	k := KafkaURL{Brokers: strings.Split(hosts, ","), TopicPrefix: kafka.DefaultTopicPrefix, Eventual: eventualURL}
	q, err := url.ParseQuery(strings.TrimRight(params, "&"))
	if err != nil {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: %w", u, err)
	}
	for name, vs := range q {
		switch name {
		case "topic_prefix":
			k.TopicPrefix = vs[0]
		default:
			return KafkaURL{}, fmt.Errorf("kafka URL %q: unknown parameter %q (known: topic_prefix, then eventual= last)", u, name)
		}
	}
	return k, nil
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
		return KafkaURL{}, "", Scheme{}, BadURL(fmt.Errorf("kafka URL %q: the eventual store must be cassandra:// or postgres://, not %q", u, p.Eventual))
	}
	return p, strings.ToLower(kind), s, nil
}

// Tables returns the Kafka journal's eventual tables in the database of
// inner, an open cassandra or postgres store, creating them when create.
func Tables(ctx context.Context, inner *Store, create bool) (eventual.Tables, error) {
	switch inner.Kind {
	case "cassandra":
		s, ok := inner.Admin.(cassandraSession)
		if !ok {
			return nil, errors.New("kafka journal: the cassandra store offers no session")
		}
		return cql.New(ctx, s.Session(), s.Keyspace(), create, "")
	case "postgres":
		s, ok := inner.Admin.(postgresPool)
		if !ok {
			return nil, errors.New("kafka journal: the postgres store offers no pool")
		}
		return pg.New(ctx, s.Pool(), s.Schema(), create)
	}
	return nil, fmt.Errorf("kafka journal: no eventual store on %s", inner.Kind)
}

func (k kafkaScheme) open(ctx context.Context, u string, mode Mode) (*Store, error) {
	p, _, scheme, err := k.inner(u)
	if err != nil {
		return nil, err
	}
	inner, err := scheme.Open(ctx, p.Eventual, mode)
	if err != nil {
		return nil, err
	}
	tables, err := Tables(ctx, inner, mode == Create)
	if err != nil {
		inner.Close()
		if mode == Existing {
			return nil, fmt.Errorf("%w; create it with: annals init --store %s", err, u)
		}
		return nil, err
	}
	j, err := kafka.Open(ctx, p.Brokers, tables, kafka.WithTopic(p.Topic), kafka.WithSnapshots(inner.Snapshots))
	if err != nil {
		inner.Close()
		return nil, badURLIf(err, kafka.ErrInvalidConfig)
	}
	return &Store{
		Kind: "kafka", Where: fmt.Sprintf("Kafka %s, eventual store %s", strings.Join(p.Brokers, ","), inner.Where), MaxPayloadSize: kafka.DefaultMaxPayloadSize,
		Journal: j, Snapshots: inner.Snapshots, Queries: j.ReadJournal(0), Admin: kafkaAdmin{Journal: j, inner: inner.Admin},
		Close: func() error { return errors.Join(j.Close(), inner.Close()) },
	}, nil
}

// kafkaAdmin is the Kafka journal's operator capabilities (statistics,
// purge), with the snapshot figures of the eventual database's store
// added to the statistics.
type kafkaAdmin struct {
	*kafka.Journal
	inner any
}

// Stats implements admin.StatsReader: the journal's figures, and the
// snapshot counts the eventual database's store reports.
func (a kafkaAdmin) Stats(ctx context.Context) (admin.Stats, error) {
	st, err := a.Journal.Stats(ctx)
	if err != nil {
		return admin.Stats{}, err
	}
	sr, ok := a.inner.(admin.StatsReader)
	if !ok {
		return st, nil
	}
	in, err := sr.Stats(ctx)
	if err != nil {
		return admin.Stats{}, err
	}
	for _, its := range in.EntityTypes {
		if its.Snapshots == 0 {
			continue
		}
		i := slices.IndexFunc(st.EntityTypes, func(t admin.TypeStats) bool { return t.EntityType == its.EntityType })
		if i < 0 {
			st.EntityTypes = append(st.EntityTypes, admin.TypeStats{EntityType: its.EntityType})
			i = len(st.EntityTypes) - 1
		}
		st.EntityTypes[i].Snapshots, st.EntityTypes[i].SnapshotBytes = its.Snapshots, its.SnapshotBytes
	}
	slices.SortFunc(st.EntityTypes, func(a, b admin.TypeStats) int { return strings.Compare(a.EntityType, b.EntityType) })
	st.StorageBytes = in.StorageBytes
	return st, nil
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
		s, err := k.open(ctx, u, Create)
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
func (m *kafkaMigrator) Close() error {
	if c, ok := m.Migrator.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

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
		return errors.Join(kafka.DeleteTopics(dctx, p.Brokers, prefix), removeInner())
	}
	return "kafka://" + strings.Join(p.Brokers, ",") + "/?topic_prefix=" + url.QueryEscape(prefix) + "&eventual=" + inner, remove, nil
}

// cassandraSession and postgresPool are what the eventual tables need of
// the cassandra and postgres stores.
type cassandraSession interface {
	Session() *gocql.Session
	Keyspace() string
}

type postgresPool interface {
	Pool() *pgxpool.Pool
	Schema() string
}
