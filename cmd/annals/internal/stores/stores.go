// Package stores is the annals command's URL mux: it opens a store from a
// URL such as "sqlite:./annals.db", "memory:" or "postgres://…".
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
	"net/url"
	"slices"
	"strings"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/snapshot"
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
	// KitSnapshotExceptions names the snapshot rules of the compliance
	// kit the store cannot keep by design, with the reasons (annals check
	// skips them); KitStoreTimestamps: an event's timestamp is the time
	// the store wrote it.
	KitSnapshotExceptions map[string]string
	KitStoreTimestamps    bool
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

// ErrBadURL reports a store URL that is malformed: of no known scheme
// (ErrUnknownScheme), or of a known one with a missing or malformed part,
// a parameter the store does not know or a value it refuses. Nothing was
// opened, created or changed. Every Scheme reports its malformed URLs
// with an error errors.Is matches to ErrBadURL (see BadURL).
var ErrBadURL = errors.New("malformed store URL")

// ErrUnknownScheme reports a URL no scheme of the mux opens; errors.Is
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

func (m *Mux) scheme(url string) (Scheme, error) {
	name, _, ok := strings.Cut(url, ":")
	s, found := m.schemes[strings.ToLower(name)]
	if !ok || !found {
		var names []string
		for n := range m.schemes {
			names = append(names, n)
		}
		slices.Sort(names)
		return Scheme{}, BadURL(fmt.Errorf("%w %q: use sqlite:PATH (for example sqlite:./annals.db), postgres://USER@HOST/DB, cassandra://HOST:PORT/KEYSPACE, kafka://HOST:PORT/?eventual=cassandra://HOST:PORT/KEYSPACE or memory: (known schemes: %s)", ErrUnknownScheme, url, strings.Join(names, ", ")))
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

// Migrator returns the migrator of the store at url.
func (m *Mux) Migrator(ctx context.Context, url string) (admin.Migrator, error) {
	s, err := m.scheme(url)
	if err != nil {
		return nil, err
	}
	return s.Migrator(ctx, url)
}

// Scratch returns a scratch store beside the one at url (see
// Scheme.Scratch).
func (m *Mux) Scratch(ctx context.Context, url string) (string, func() error, error) {
	s, err := m.scheme(url)
	if err != nil {
		return "", nil, err
	}
	return s.Scratch(ctx, url)
}

// Redact returns the store URL raw with its passwords (the URL's own, and
// an eventual store's in a kafka:// URL) replaced by "xxxxx", for
// printing.
func Redact(raw string) string {
	if head, eventual, ok := strings.Cut(raw, "eventual="); ok {
		return Redact(head) + "eventual=" + Redact(eventual)
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); !has {
		return raw
	}
	return u.Redacted()
}
