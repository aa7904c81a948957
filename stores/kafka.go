package stores

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql"
	"github.com/annals-go/annals/store/kafka/eventual/pg"
)

// KafkaURL is a parsed kafka:// URL:
// kafka://HOST:PORT[,HOST:PORT...]/?[topic_prefix=P&]eventual=URL, where
// URL is the eventual store's database (a cassandra:// or postgres://
// store URL) and topic_prefix (default "journal-") starts each entity
// type's topic.
type KafkaURL struct {
	// Brokers are the seed brokers' addresses.
	Brokers []string
	// TopicPrefix starts each entity type's topic.
	TopicPrefix string
	// Eventual is the eventual store's URL.
	Eventual string
}

// Topic returns the topic of an entity type; for "", the prefix without
// its trailing separator.
func (k KafkaURL) Topic(entityType string) string {
	if entityType == "" {
		return strings.TrimRight(k.TopicPrefix, "-._")
	}
	return k.TopicPrefix + entityType
}

// ParseKafkaURL reads a kafka:// URL (any readmodel= parameter is left
// out); its errors match ErrBadURL and carry no password.
func ParseKafkaURL(u string) (KafkaURL, error) {
	k, err := parseKafkaURL(u, splitURL(u))
	if err != nil {
		return KafkaURL{}, hideSecrets(BadURL(err), u)
	}
	return k, nil
}

func parseKafkaURL(u string, p urlParts) (KafkaURL, error) {
	const want = "kafka://HOST:PORT/?eventual=cassandra://HOST:PORT/KEYSPACE (or postgres://…)"
	rest, ok := strings.CutPrefix(p.base, "kafka://")
	if !ok {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: want %s", Redact(u), want)
	}
	hosts, params, _ := strings.Cut(rest, "?")
	hosts = strings.TrimRight(hosts, "/")
	if !p.hasEventual || p.eventual == "" || hosts == "" {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: want brokers and an eventual store: %s", Redact(u), want)
	}
	k := KafkaURL{Brokers: strings.Split(hosts, ","), TopicPrefix: kafka.DefaultTopicPrefix, Eventual: p.eventual}
	q, err := url.ParseQuery(strings.TrimRight(params, "&"))
	if err != nil {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: %w", Redact(u), err)
	}
	for name, vs := range q {
		switch name {
		case "topic_prefix":
			k.TopicPrefix = vs[0]
		default:
			return KafkaURL{}, fmt.Errorf("kafka URL %q: unknown parameter %q (known: topic_prefix, then eventual= and readmodel= last)", Redact(u), name)
		}
	}
	return k, nil
}

// eventualKind is the kind of a Kafka journal's eventual store.
func eventualKind(u string, k KafkaURL) (string, error) {
	kind, _ := kindOf(k.Eventual)
	if kind != "cassandra" && kind != "postgres" || splitURL(k.Eventual).hasEventual {
		return "", BadURL(fmt.Errorf("kafka URL %q: the eventual store must be cassandra:// or postgres://, not %q", Redact(u), Redact(k.Eventual)))
	}
	return kind, nil
}

// openKafka opens a kafka:// URL: the Kafka journal (store/kafka) on its
// eventual store, whose database also holds the snapshots (that store's
// own snapshot tables). Its Store is the *kafka.Journal's capabilities
// (admin.StatsReader with the eventual database's snapshot figures,
// admin.Purger); it keeps no projection offsets (readmodel= names their
// database). Without WithMigrate, missing eventual tables are an error
// naming the command that creates them.
func openKafka(ctx context.Context, raw string, p urlParts, cfg config) (*Stack, error) {
	k, err := parseKafkaURL(raw, p)
	if err != nil {
		return nil, BadURL(err)
	}
	kind, err := eventualKind(raw, k)
	if err != nil {
		return nil, err
	}
	var inner *Stack
	if kind == "cassandra" {
		inner, err = openCassandra(ctx, k.Eventual, cfg)
	} else {
		inner, err = openPostgres(ctx, k.Eventual, cfg)
	}
	if err != nil {
		return nil, err
	}
	tables, err := eventualTables(ctx, inner.Store, cfg.migrate)
	if err != nil {
		inner.Close()
		if !cfg.migrate {
			return nil, fmt.Errorf("%w; create it with: annals init --store %s", err, Redact(raw))
		}
		return nil, err
	}
	j, err := kafka.Open(ctx, k.Brokers, tables, kafka.WithTopic(k.Topic), kafka.WithSnapshots(inner.Snapshots))
	if err != nil {
		inner.Close()
		return nil, badURLIf(err, kafka.ErrInvalidConfig)
	}
	return &Stack{
		Kind: "kafka", Where: fmt.Sprintf("Kafka %s, eventual store %s", strings.Join(k.Brokers, ","), inner.Where),
		Journal: j, Snapshots: inner.Snapshots, Queries: j.ReadJournal(0), Store: kafkaAdmin{Journal: j, inner: inner.Store},
		closers: []func() error{j.Close, inner.Close},
	}, nil
}

// eventualTables returns the Kafka journal's eventual tables in the database of
// store, an open *cassandra.Store or *postgres.Store (a Stack's Store),
// creating them when create.
func eventualTables(ctx context.Context, store any, create bool) (eventual.Tables, error) {
	switch s := store.(type) {
	case cassandraSession:
		return cql.New(ctx, s.Session(), s.Keyspace(), create, "")
	case postgresPool:
		return pg.New(ctx, s.Pool(), s.Schema(), create)
	}
	return nil, fmt.Errorf("kafka journal: no eventual store on %T", store)
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
