// Package stores opens a whole store stack from one URL: the journal,
// the snapshots, the read journal, the projection offsets with the read
// model's transactions, durable state and cluster membership where the
// store has them. A program that moves from one store to another changes
// the URL, and at most the type of its read model's transactions:
//
//	sqlite:./app.db
//	postgres://app@db:5432/app?schema=annals
//	cassandra://127.0.0.1:9042/app?readmodel=sqlite:./readmodel.db
//	kafka://127.0.0.1:9092/?eventual=cassandra://127.0.0.1:9042/journal&readmodel=postgres://app@db/app?schema=readmodel
//	memory:
//
// It sits above every store package and imports them all (and their
// drivers), so a program that uses one store only imports that store's
// package directly (store/sqlite, store/postgres, ...), as the package's
// own tests and examples show side by side.
//
// A URL's own parameters are its store's (see each store's Open). Two
// parameters name another store and take a whole URL as their value:
// eventual= (kafka:// only: the eventual store's database, cassandra:// or
// postgres://) and readmodel= (cassandra:// and kafka:// only: the
// database of the projection offsets and the read model, sqlite:,
// postgres:// or memory:). They come after the store's own parameters,
// and each value runs to the next of them or to the end of the URL, so a
// nested URL keeps its own '?' and '&' unescaped.
package stores

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
)

// Stack is an open store stack: the parts a program uses. Its fields are
// set by Open and must not be changed; Close closes every part.
type Stack struct {
	// Kind is the store's kind: "sqlite", "memory", "postgres",
	// "cassandra" or "kafka".
	Kind string
	// Where names the stack for people (a file path, a host and database,
	// the brokers and the eventual store, and the read model's database),
	// never with a password.
	Where string
	// Journal is the store's journal.
	Journal journal.Journal
	// Snapshots is the store's snapshot store (the Kafka journal's is the
	// eventual database's).
	Snapshots snapshot.Store
	// Queries is the read journal. Every store answers events by
	// persistence id; a program finds the other queries
	// (query.EventsByTagQuery, query.EventsBySlicesQuery,
	// query.PersistenceIDsQuery, ...) by type assertion.
	Queries query.EventsByPersistenceIDQuery
	// Offsets is the projection offset store of the read model's
	// database: the store's own on sqlite:, postgres:// and memory:, the
	// readmodel= database's on cassandra:// and kafka://, nil when such a
	// URL names none. It is an offsets.TxStore of its database's
	// transactions: ReadModelOf returns it so.
	Offsets offsets.Store
	// ReadModelKind is the kind of the read model's database ("sqlite",
	// "postgres", "memory"), "" when the stack has none.
	ReadModelKind string
	// Durable is the durable-state store; nil when the store has none
	// (kafka).
	Durable durable.Store
	// Membership keeps cluster members and leases; nil when the store has
	// none (kafka).
	Membership membership.Store
	// ReadModelMembership keeps cluster members and leases in the read
	// model's database: Membership itself on sqlite:, postgres:// and
	// memory:, the readmodel= database's on cassandra:// and kafka://, nil
	// when the stack has no read model. A cluster of projection instances
	// (cluster.Daemon) keeps its leases here, so that an exactly-once
	// handler checks its lease in the read model's transaction
	// (membership.TxChecker of the same Tx as ReadModelOf) while the
	// entities are shared through Membership or the Kafka journal's
	// consumer group.
	ReadModelMembership membership.Store
	// Store is the store value, which offers the operator capabilities of
	// package admin (admin.StatsReader, admin.Purger, ...) by type
	// assertion: *sqlite.Store, *postgres.Store, *cassandra.Store, or for
	// kafka:// the *kafka.Journal's with the eventual database's snapshot
	// figures in its statistics. Nil when the store offers none (memory).
	Store any

	closers   []func() error
	closeOnce sync.Once
	closeErr  error
}

// Close closes every part of the stack, the journal's store first and
// the read model's database last, and returns their errors joined. Calls
// after the first return the first's result.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		for _, c := range s.closers {
			errs = append(errs, c())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// ErrNoReadModel reports that a stack has no read model database (a
// cassandra:// or kafka:// URL without readmodel=), or that its database's
// transactions are not of the type asked for.
var ErrNoReadModel = errors.New("stores: no read model of that transaction type")

// ReadModelOf returns the stack's projection offsets as the offset store
// of a read model whose transactions are Tx (*sql.Tx on SQLite, pgx.Tx on
// PostgreSQL, *memory.Tx on memory), for projection.ExactlyOnce and
// projection.ExactlyOnceGrouped: the handler's writes and the offset
// commit in one transaction of that database. A stack without a read
// model, or with one of another transaction type, is an error matching
// ErrNoReadModel that names what the stack has.
func ReadModelOf[Tx any](s *Stack) (offsets.TxStore[Tx], error) {
	want := reflect.TypeFor[Tx]()
	if s.Offsets == nil {
		return nil, fmt.Errorf("%w: the %s store keeps no read model; name its database with readmodel=sqlite:PATH or readmodel=postgres://… in the URL", ErrNoReadModel, s.Kind)
	}
	tx, ok := s.Offsets.(offsets.TxStore[Tx])
	if !ok {
		return nil, fmt.Errorf("%w: the read model is a %s database, whose transactions are %s, not %s", ErrNoReadModel, s.ReadModelKind, txType(s.Offsets), want)
	}
	return tx, nil
}

// txType is the type of the transactions an offset store's InTx hands
// out, "unknown" when it has no InTx.
func txType(o offsets.Store) string {
	m := reflect.ValueOf(o).MethodByName("InTx")
	if !m.IsValid() || m.Type().NumIn() != 2 || m.Type().In(1).Kind() != reflect.Func || m.Type().In(1).NumIn() != 1 {
		return "unknown"
	}
	return m.Type().In(1).In(0).String()
}

// Option changes how Open opens a stack.
type Option func(*config)

type config struct {
	migrate bool
}

// WithMigrate, when on, has Open create what is missing (the SQLite file,
// the PostgreSQL schema, the Cassandra keyspace, the Kafka journal's
// eventual tables, the read model's database) and migrate every schema to
// the current version. Off (the default), Open opens only stores that
// exist with the current schema and creates or changes nothing; a missing
// one is an error naming the command that creates it.
func WithMigrate(on bool) Option { return func(c *config) { c.migrate = on } }

// ErrBadURL reports a store URL that is malformed: of no known scheme
// (ErrUnknownScheme), or of a known one with a missing or malformed part,
// a parameter the store does not know or a value it refuses. Nothing was
// opened, created or changed.
var ErrBadURL = errors.New("malformed store URL")

// ErrUnknownScheme reports a URL of no scheme Open knows; errors.Is
// matches it to ErrBadURL too.
var ErrUnknownScheme = errors.New("unknown store URL")

// BadURL returns err marked as a malformed URL: errors.Is matches it to
// ErrBadURL and to err's own chain, and its message is err's. A nil err
// stays nil.
func BadURL(err error) error {
	if err == nil || errors.Is(err, ErrBadURL) {
		return err
	}
	return &badURLError{err: err}
}

// badURLIf marks err as a malformed URL when it matches one of the
// stores' configuration errors (such as postgres.ErrInvalidConfig, which
// a store returns for its URL's form and parameters).
func badURLIf(err error, configErrors ...error) error {
	for _, c := range configErrors {
		if errors.Is(err, c) {
			return BadURL(err)
		}
	}
	return err
}

type badURLError struct{ err error }

func (e *badURLError) Error() string   { return e.err.Error() }
func (e *badURLError) Unwrap() []error { return []error{ErrBadURL, e.err} }

// Open opens the store stack at url (see the package comment for the
// forms). A malformed url is an error matching ErrBadURL, returned before
// anything is opened or created. No error carries a password of the url.
// The caller closes the stack.
func Open(ctx context.Context, url string, opts ...Option) (*Stack, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s, err := open(ctx, url, cfg)
	if err != nil {
		return nil, hideSecrets(err, url)
	}
	return s, nil
}

// kindOf returns the kind of store raw names by its scheme ("postgresql"
// is "postgres"); an unknown one is an error matching ErrUnknownScheme.
func kindOf(raw string) (string, error) {
	name, _, ok := strings.Cut(raw, ":")
	switch kind := strings.ToLower(name); {
	case !ok:
	case kind == "sqlite", kind == "memory", kind == "postgres", kind == "cassandra", kind == "kafka":
		return kind, nil
	case kind == "postgresql":
		return "postgres", nil
	}
	return "", BadURL(fmt.Errorf("%w %q: use sqlite:PATH (for example sqlite:./annals.db), postgres://USER@HOST/DB, cassandra://HOST:PORT/KEYSPACE, kafka://HOST:PORT/?eventual=cassandra://HOST:PORT/KEYSPACE or memory: (known schemes: cassandra, kafka, memory, postgres, postgresql, sqlite)", ErrUnknownScheme, Redact(raw)))
}

func open(ctx context.Context, raw string, cfg config) (*Stack, error) {
	p := splitURL(raw)
	kind, err := kindOf(p.base)
	if err != nil {
		return nil, err
	}
	if p.hasEventual && kind != "kafka" {
		return nil, BadURL(fmt.Errorf("%s URL %q: eventual= names the Kafka journal's eventual store, for kafka:// URLs only", kind, Redact(raw)))
	}
	if p.hasReadModel {
		if kind != "cassandra" && kind != "kafka" {
			return nil, BadURL(fmt.Errorf("%s URL %q: readmodel= is for cassandra:// and kafka:// URLs; a %s store keeps its read model in its own database", kind, Redact(raw), kind))
		}
		// The read model's URL is checked before the store opens, so that
		// a malformed one leaves nothing created.
		if err := checkReadModel(ctx, p.readModel); err != nil {
			return nil, err
		}
	}
	var s *Stack
	switch kind {
	case "sqlite":
		s, err = openSQLite(ctx, p.base, cfg)
	case "memory":
		s, err = openMemory(p.base)
	case "postgres":
		s, err = openPostgres(ctx, p.base, cfg)
	case "cassandra":
		s, err = openCassandra(ctx, p.base, cfg)
	case "kafka":
		s, err = openKafka(ctx, raw, p, cfg)
	}
	if err != nil || !p.hasReadModel {
		return s, err
	}
	rm, err := open(ctx, p.readModel, cfg)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("read model %s: %w", Redact(p.readModel), err), s.Close())
	}
	s.Offsets, s.ReadModelKind, s.ReadModelMembership = rm.Offsets, rm.Kind, rm.Membership
	s.Where += ", read model " + rm.Where
	s.closers = append(s.closers, rm.Close)
	return s, nil
}

// checkReadModel refuses, creating nothing, a readmodel= URL that is
// malformed or of a database without a read model's transactions.
func checkReadModel(ctx context.Context, raw string) error {
	kind, err := kindOf(raw)
	if err != nil {
		return fmt.Errorf("readmodel=: %w", err)
	}
	switch p := splitURL(raw); {
	case p.hasEventual || p.hasReadModel:
		return BadURL(fmt.Errorf("readmodel=%s: a read model's URL names no other store", Redact(raw)))
	case kind == "sqlite":
		return sqliteURL(raw)
	case kind == "memory":
		return memoryURL(raw)
	case kind == "postgres":
		return checkPostgres(ctx, raw)
	}
	return BadURL(fmt.Errorf("readmodel=%s: a read model's database is sqlite:PATH, postgres://… or memory:, whose transactions hold the projection offsets with the read model's rows; %s keeps no projection offsets", Redact(raw), kind))
}
