// Package stores is the annals command's URL mux: it opens a store from a
// URL such as "sqlite:./annals.db", "memory:" or "postgres://…".
//
// The opening itself is the public package stores (stores.Open, one
// implementation for programs and the command); this package adds what
// only the command needs: the modes, the compliance kit's facts about
// each store, migrators and scratch stores.
//
// The mux is explicit (built by New, no package-level registry). Each URL
// scheme is a [Scheme]: how to open a store of that kind, how to migrate
// its schema without opening it, and how to make a scratch store beside it
// for benchmarks. A store plugs in by providing one Scheme; the commands
// find everything else they need by type assertion on what Open returns.
package stores

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
	stacks "github.com/annals-go/annals/stores"
)

// Mode says what Open may do to the store.
type Mode int

const (
	// Existing opens a store that exists and has the current schema. It
	// creates nothing and migrates nothing; a missing store, or one whose
	// schema needs migrating, is an error that says which command fixes it.
	Existing Mode = iota
	// Create creates the store if missing and migrates its schema.
	Create
)

// Store is an open store: the parts the commands use.
type Store struct {
	// Kind is the scheme's name ("sqlite", "memory", "postgres",
	// "cassandra").
	Kind string
	// Where names the store for people: a file path, "memory", a host and
	// database.
	Where     string
	Journal   journal.Journal
	Snapshots snapshot.Store
	// Queries is the read journal; the commands find its query
	// capabilities (query.EventsByTagQuery, ...) by type assertion. May be
	// nil.
	Queries any
	// Offsets is the projection offset store; nil when the store has none.
	Offsets offsets.Store
	// Durable is the durable-state store; nil when the store has none.
	Durable durable.Store
	// Membership keeps cluster members and leases; nil when the store has
	// none.
	Membership membership.Store
	// ReadModelMembership keeps the members and leases of the read
	// model's database when it is apart from the store (cassandra:// and
	// kafka:// with readmodel=), where a projection's instances hold
	// their leases; nil otherwise.
	ReadModelMembership membership.Store
	// KitExceptions names the rules of the compliance kit the store
	// cannot keep by design, with the reasons (storetest.Store's
	// Exceptions: annals check skips them); KitStoreTimestamps: an
	// event's timestamp is the time the store wrote it.
	KitExceptions      map[string]string
	KitStoreTimestamps bool
	// GlobalOrdering: the journal assigns journal.Repr.Ordering, growing in
	// commit order across all ids (annals check then has the compliance
	// kit check it).
	GlobalOrdering bool
	// MaxPayloadSize is the largest event payload the journal accepts, in
	// bytes (annals check writes one byte more among small writes).
	MaxPayloadSize int
	// IDsInStoreOrder: the read journal lists persistence ids in an order
	// of its own (Cassandra's token order), not ascending.
	IDsInStoreOrder bool
	// Admin offers the operator capabilities of package admin
	// (admin.StatsReader, admin.Purger, ...) by type assertion. May be nil.
	Admin any
	// Close closes the store.
	Close func() error
}

// Scheme is one kind of store. Its functions report a malformed url with
// an error that matches ErrBadURL (BadURL), before they touch anything.
type Scheme struct {
	// Open opens the store at url in the given mode.
	Open func(ctx context.Context, url string, mode Mode) (*Store, error)
	// Migrator returns the migrator of the store at url, which must not
	// change anything until its Migrate is called. If it is an io.Closer,
	// the command closes it when done.
	Migrator func(ctx context.Context, url string) (admin.Migrator, error)
	// Scratch returns the URL of an empty store of the same kind and
	// place (the same disk, the same server) for annals bench, check and
	// crash-test, and a function that removes it. It must not touch the
	// store at url.
	Scratch func(ctx context.Context, url string) (scratch string, remove func() error, err error)
}

// Mux opens stores by the scheme of their URL.
type Mux struct {
	schemes map[string]Scheme
}

// New returns the mux of the stores built into the annals command.
func New() *Mux {
	m := &Mux{schemes: map[string]Scheme{}}
	m.Register(SQLite(), "sqlite")
	m.Register(Memory(), "memory")
	m.Register(Postgres(), "postgres", "postgresql")
	m.Register(Cassandra(), "cassandra")
	m.Register(Kafka(Cassandra(), Postgres()), "kafka")
	return m
}

// Register makes s open the URLs of the given schemes (the part before
// the first ':'), replacing any earlier registration.
func (m *Mux) Register(s Scheme, schemes ...string) {
	for _, name := range schemes {
		m.schemes[strings.ToLower(name)] = s
	}
}

// ErrBadURL reports a store URL that is malformed (stacks.ErrBadURL):
// nothing was opened, created or changed. Every Scheme reports its
// malformed URLs with an error errors.Is matches to ErrBadURL (see
// BadURL).
var ErrBadURL = stacks.ErrBadURL

// ErrUnknownScheme reports a URL no scheme of the mux opens; errors.Is
// matches it to ErrBadURL too.
var ErrUnknownScheme = stacks.ErrUnknownScheme

// BadURL returns err marked as a malformed URL (stacks.BadURL).
func BadURL(err error) error { return stacks.BadURL(err) }

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

// Redact returns the store URL raw with its passwords replaced by "xxxxx",
// for printing (stacks.Redact).
func Redact(raw string) string { return stacks.Redact(raw) }

// KafkaURL is a parsed kafka:// URL (stacks.KafkaURL).
type KafkaURL = stacks.KafkaURL

// ParseKafkaURL reads a kafka:// URL; its errors match ErrBadURL
// (stacks.ParseKafkaURL).
func ParseKafkaURL(u string) (KafkaURL, error) { return stacks.ParseKafkaURL(u) }

func (m *Mux) scheme(url string) (Scheme, error) {
	name, _, ok := strings.Cut(url, ":")
	s, found := m.schemes[strings.ToLower(name)]
	if !ok || !found {
		var names []string
		for n := range m.schemes {
			names = append(names, n)
		}
		slices.Sort(names)
		return Scheme{}, BadURL(fmt.Errorf("%w %q: use sqlite:PATH (for example sqlite:./annals.db), postgres://USER@HOST/DB, cassandra://HOST:PORT/KEYSPACE, kafka://HOST:PORT/?eventual=cassandra://HOST:PORT/KEYSPACE or memory: (known schemes: %s)", ErrUnknownScheme, Redact(url), strings.Join(names, ", ")))
	}
	return s, nil
}

// Open opens the store at url.
func (m *Mux) Open(ctx context.Context, url string, mode Mode) (*Store, error) {
	s, err := m.scheme(url)
	if err != nil {
		return nil, err
	}
	return s.Open(ctx, url, mode)
}

// Migrator returns the migrator of the store at url; for a URL with
// readmodel=, one that migrates the store, then the read model's
// database.
func (m *Mux) Migrator(ctx context.Context, url string) (admin.Migrator, error) {
	storeURL, readModel, err := m.splitReadModel(url)
	if err != nil {
		return nil, err
	}
	s, err := m.scheme(storeURL)
	if err != nil {
		return nil, err
	}
	sm, err := s.Migrator(ctx, storeURL)
	if err != nil || readModel == "" {
		return sm, err
	}
	rs, err := m.scheme(readModel)
	if err != nil {
		return nil, errors.Join(err, closeMigrator(sm))
	}
	rm, err := rs.Migrator(ctx, readModel)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("read model %s: %w", Redact(readModel), err), closeMigrator(sm))
	}
	return &withReadModel{Migrator: sm, readModel: rm}, nil
}

// splitReadModel cuts url's readmodel= off (stacks.ReadModelURL), which
// only cassandra:// and kafka:// URLs take.
func (m *Mux) splitReadModel(url string) (storeURL, readModel string, err error) {
	storeURL, readModel = stacks.ReadModelURL(url)
	if readModel == "" {
		return url, "", nil
	}
	switch kind, _, _ := strings.Cut(strings.ToLower(storeURL), ":"); kind {
	case "cassandra", "kafka":
		return storeURL, readModel, nil
	default:
		return "", "", BadURL(fmt.Errorf("%s URL %q: readmodel= is for cassandra:// and kafka:// URLs; a %s store keeps its read model in its own database", kind, Redact(url), kind))
	}
}

// withReadModel migrates a store, then its read model's database. Its
// schema version is the store's.
type withReadModel struct {
	admin.Migrator
	readModel admin.Migrator
}

// PendingMigrations lists the store's steps, then the read model's.
func (m *withReadModel) PendingMigrations(ctx context.Context) ([]admin.Migration, error) {
	return m.both(ctx, admin.Migrator.PendingMigrations)
}

// Migrate migrates the store, then the read model's database.
func (m *withReadModel) Migrate(ctx context.Context) ([]admin.Migration, error) {
	return m.both(ctx, admin.Migrator.Migrate)
}

// both runs step on the store's migrator, then on the read model's, and
// returns their steps in that order.
func (m *withReadModel) both(ctx context.Context, step func(admin.Migrator, context.Context) ([]admin.Migration, error)) ([]admin.Migration, error) {
	steps, err := step(m.Migrator, ctx)
	if err != nil {
		return nil, err
	}
	more, err := step(m.readModel, ctx)
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	return append(steps, readModelSteps(more)...), nil
}

// Close closes both migrators that have a Close.
func (m *withReadModel) Close() error {
	return errors.Join(closeMigrator(m.Migrator), closeMigrator(m.readModel))
}

// readModelSteps marks the read model database's steps as its own.
func readModelSteps(steps []admin.Migration) []admin.Migration {
	for i := range steps {
		steps[i].SQL = "-- the read model's database\n" + steps[i].SQL
	}
	return steps
}

// closeMigrator closes m when it has a Close.
func closeMigrator(m admin.Migrator) error {
	if c, ok := m.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// Scratch returns a scratch store beside the one at url (see
// Scheme.Scratch); a readmodel= parameter is left out (the scratch store
// is the journal's, for bench, check and crash-test).
func (m *Mux) Scratch(ctx context.Context, url string) (string, func() error, error) {
	url, _, err := m.splitReadModel(url)
	if err != nil {
		return "", nil, err
	}
	s, err := m.scheme(url)
	if err != nil {
		return "", nil, err
	}
	return s.Scratch(ctx, url)
}

// openStack opens the store at url through stacks.Open (mode Create
// migrates), with the compliance kit's facts of its kind.
func openStack(ctx context.Context, url string, mode Mode) (*Store, error) {
	st, err := stacks.Open(ctx, url, stacks.WithMigrate(mode == Create))
	if err != nil {
		return nil, err
	}
	s := &Store{
		Kind: st.Kind, Where: st.Where,
		Journal: st.Journal, Snapshots: st.Snapshots, Queries: st.Queries, Offsets: st.Offsets,
		Durable: st.Durable, Membership: st.Membership, Admin: st.Store,
		Close: st.Close,
	}
	if st.ReadModelKind != "" && st.ReadModelKind != st.Kind {
		s.ReadModelMembership = st.ReadModelMembership
	}
	switch st.Kind {
	case "sqlite":
		s.MaxPayloadSize, s.GlobalOrdering = sqlite.DefaultMaxPayloadSize, true
	case "memory":
		s.MaxPayloadSize, s.GlobalOrdering = memory.DefaultMaxPayloadSize, true
	case "postgres":
		s.MaxPayloadSize = postgres.DefaultMaxPayloadSize
		if p, ok := st.Store.(*postgres.Store); ok {
			k := pgtest.Kit(p)
			s.KitExceptions, s.KitStoreTimestamps = k.Exceptions, k.StoreTimestamps
		}
	case "cassandra":
		s.MaxPayloadSize, s.IDsInStoreOrder = cassandra.DefaultMaxPayloadSize, true
	case "kafka":
		s.MaxPayloadSize = kafka.DefaultMaxPayloadSize
	}
	return s, nil
}
