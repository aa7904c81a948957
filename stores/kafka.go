package stores

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/internal/clientauth"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql"
	"github.com/annals-go/annals/store/kafka/eventual/pg"
)

// KafkaURL is a parsed kafka:// URL:
// kafka://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]/?[PARAMS&]eventual=URL,
// where URL is the eventual store's database (a cassandra:// or
// postgres:// store URL). The parameters:
//   - topic_prefix (default "journal-") starts each entity type's topic;
//   - sasl=plain, scram-sha-256 or scram-sha-512 logs in as USER with its
//     password: the URL's, else the first line of password_file=PATH,
//     else the environment variable KafkaPasswordEnv;
//   - tls=true connects over TLS 1.2 or later, checking the brokers'
//     certificates against the system's CAs or tls_ca=PATH (PEM), and
//     their names against the address dialled (or tls_server_name;
//     tls_verify_host=false checks the chain only); tls_cert and tls_key
//     (PEM) give a client certificate.
type KafkaURL struct {
	// Brokers are the seed brokers' addresses.
	Brokers []string
	// TopicPrefix starts each entity type's topic.
	TopicPrefix string
	// Eventual is the eventual store's URL.
	Eventual string
	// ClientOptions are the franz-go options of the URL's TLS and SASL
	// settings, for every client of the cluster (the journal's, a
	// replicator's, an admin's).
	ClientOptions []kgo.Opt

	userInfo string     // the URL's user[:password], as written
	security url.Values // its sasl, password_file and tls parameters
}

// String returns the URL with its passwords hidden (Redact), so that
// printing a KafkaURL never shows them.
func (k KafkaURL) String() string { return Redact(k.With(k.TopicPrefix, k.Eventual)) }

// With returns the URL of the same brokers and credentials (user, SASL,
// TLS) with topics prefixed by prefix and the eventual store eventual.
func (k KafkaURL) With(prefix, eventual string) string {
	var b strings.Builder
	b.WriteString("kafka://")
	if k.userInfo != "" {
		b.WriteString(k.userInfo + "@")
	}
	b.WriteString(strings.Join(k.Brokers, ",") + "/?")
	if len(k.security) > 0 {
		b.WriteString(k.security.Encode() + "&")
	}
	b.WriteString("topic_prefix=" + url.QueryEscape(prefix) + "&eventual=" + eventual)
	return b.String()
}

// KafkaPasswordEnv is the environment variable a kafka:// URL's password
// is read from when the URL names a user without a password and no
// password_file.
const KafkaPasswordEnv = "ANNALS_KAFKA_PASSWORD"

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
	var user, password string
	var k0 KafkaURL // the user info and security parameters, kept for With
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		info := hosts[:at]
		hosts = hosts[at+1:]
		k0.userInfo = info
		var err error
		if user, password, err = userInfo(info); err != nil {
			return KafkaURL{}, fmt.Errorf("kafka URL %q: user info: %w", Redact(u), err)
		}
	}
	if !p.hasEventual || p.eventual == "" || hosts == "" {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: want brokers and an eventual store: %s", Redact(u), want)
	}
	k := KafkaURL{Brokers: strings.Split(hosts, ","), TopicPrefix: kafka.DefaultTopicPrefix, Eventual: p.eventual,
		userInfo: k0.userInfo, security: url.Values{}}
	q, err := url.ParseQuery(strings.TrimRight(params, "&"))
	if err != nil {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: %w", Redact(u), err)
	}
	var mechanism, passwordFile string
	var tlsURL clientauth.TLS
	for name, vs := range q {
		bad := func(err error) error {
			return fmt.Errorf("kafka URL %q: parameter %s: %w", Redact(u), name, err)
		}
		if name != "topic_prefix" {
			k.security[name] = vs
		}
		switch name {
		case "topic_prefix":
			k.TopicPrefix = vs[0]
		case "sasl":
			mechanism = strings.ToLower(vs[0])
		case "password_file":
			passwordFile = vs[0]
		default:
			known, err := tlsURL.Param(name, vs[0])
			if err != nil {
				return KafkaURL{}, bad(err)
			}
			if !known {
				return KafkaURL{}, fmt.Errorf("kafka URL %q: unknown parameter %q (known: topic_prefix, sasl, password_file, tls, tls_ca, tls_cert, tls_key, tls_server_name, tls_verify_host, then eventual= and readmodel= last)", Redact(u), name)
			}
		}
	}
	if k.ClientOptions, err = kafkaSecurity(user, password, passwordFile, mechanism, tlsURL); err != nil {
		return KafkaURL{}, fmt.Errorf("kafka URL %q: %w", Redact(u), err)
	}
	return k, nil
}

// userInfo splits a URL's user info into the user and the password,
// unescaped.
func userInfo(info string) (user, password string, err error) {
	u, err := url.Parse("kafka://" + info + "@h")
	if err != nil || u.User == nil {
		return "", "", errors.New("not user[:password]")
	}
	password, _ = u.User.Password()
	return u.User.Username(), password, nil
}

// kafkaSecurity returns the franz-go options of a kafka:// URL's SASL and
// TLS settings.
func kafkaSecurity(user, password, passwordFile, mechanism string, t clientauth.TLS) ([]kgo.Opt, error) {
	password, err := clientauth.Password(user, password, passwordFile, KafkaPasswordEnv)
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	switch {
	case mechanism == "" && user != "":
		return nil, errors.New("a user needs sasl=plain, scram-sha-256 or scram-sha-512")
	case mechanism != "" && user == "":
		return nil, fmt.Errorf("sasl=%s needs a user (kafka://USER@HOST/…)", mechanism)
	case mechanism == "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: password}.AsMechanism()))
	case mechanism == "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism()))
	case mechanism == "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))
	case mechanism != "":
		return nil, fmt.Errorf("sasl=%s: want plain, scram-sha-256 or scram-sha-512", mechanism)
	}
	cfg, err := t.Config()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	return opts, nil
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
	j, err := kafka.Open(ctx, k.Brokers, tables, kafka.WithTopic(k.Topic), kafka.WithSnapshots(inner.Snapshots), kafka.WithClientOptions(k.ClientOptions...))
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
