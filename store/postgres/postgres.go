// Package postgres is the PostgreSQL store: a journal, a snapshot store, a
// read journal (events by persistence id, by slices, by tag, persistence ids),
// a projection offset store, a durable-state store (DurableState) and the
// members and leases of clusters (Membership), in one schema of a
// PostgreSQL database, through pgx and its connection pool.
//
// The tables follow akka-persistence-r2dbc's design and column names: every
// event carries its slice, entity type and a database timestamp
// (db_timestamp) that grows per persistence id even when the server's clock
// goes backwards, and queries by slices and by tag read in (db_timestamp,
// seq_nr) order with timestamp offsets (query.TimestampOffset).
//
// Every Write call is one transaction sent in one round trip: one insert
// statement for all its atomic writes, which also sends the NOTIFY (one
// statement per atomic write when the server refuses data it cannot
// attribute to one of them; after a lease check when fenced). In
// TimestampOrder a read of the ids' previous timestamps comes first when
// the store does not know them (see Journal.floors). A write
// that collides with another writer's (persistence id, sequence number)
// fails alone with a *journal.ConflictError; its neighbours are sent again
// without it.
//
// # Ordering of live queries
//
// A reader that has seen an event at timestamp t must not later miss an
// event stamped before t whose transaction committed after the read. Two
// orderings are offered (Ordering):
//
//   - CommitOrder (the default): each write statement takes its events'
//     timestamps from the schema's clock row (journal_clock), moving it
//     past them. The row's lock is held to the commit, so the next writer
//     stamps only after this one committed: events become visible in
//     timestamp order, across all ids, even when the server's clock steps
//     back. Live queries read up to the present with no backtracking and
//     deliver a new event as soon as its commit is announced. Writers of one
//     schema commit one transaction at a time; each carries a whole group
//     commit of the journal front.
//   - TimestampOrder: akka-persistence-r2dbc's design, for distributed SQL
//     and for write loads one row lock cannot carry. Writers do not wait for
//     one another; an event's timestamp is the later of the transaction's
//     time and its id's previous event plus 1µs. The writer takes the
//     previous event's timestamp from memory when it wrote that event
//     itself, and reads it otherwise (after a restart, another writer, a
//     conflict or a delete). Live queries stay
//     BehindCurrentTime behind the database clock, and a backtracking query
//     re-reads a window behind that to pick up events whose transactions
//     committed late; each live query delivers an event once, and an id's
//     events in order.
//
// Writers announce their commits with NOTIFY, so live queries in every
// process wake at once; polling stays as the fallback.
//
// The schema is created and upgraded by Migrate (or on Open with
// WithMigrate). Open refuses a schema that is missing, not an Annals schema,
// or of a newer version.
//
// # Sharing a journal with Akka and Pekko services
//
// On the r2dbc layout (LayoutR2DBC, URL parameter layout=r2dbc) the store
// reads and writes the tables of akka-persistence-r2dbc and Pekko
// Persistence R2DBC 1.2 (its ddl-scripts/create_tables_postgres.sql) in the
// plugin's row shapes, so Go and JVM services share entities, snapshots,
// queries and projection offsets: delete markers, one snapshot per id,
// the plugin's db_timestamp rule, TimestampOrder only, and the JVM
// projection offset store's form. The rows and the rules are listed where
// they are implemented (r2dbc.go, r2dbc_projections.go). JVM writers do
// not NOTIFY: live queries see their events within the poll interval.
package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

var (
	// ErrUnreachable reports a server Open could not connect to.
	ErrUnreachable = errors.New("postgres: server unreachable")
	// ErrSchemaMissing reports a schema without Annals tables; run Migrate
	// (or open WithMigrate, or `annals init`).
	ErrSchemaMissing = errors.New("postgres: Annals schema missing")
	// ErrNewerSchema reports a schema written by a newer version of Annals.
	ErrNewerSchema = errors.New("postgres: schema is newer than this version of Annals supports")
	// ErrNotAnnals reports a schema holding an event_journal table that
	// Annals did not create (no schema-version row).
	ErrNotAnnals = errors.New("postgres: schema holds tables that are not an Annals store")
	// ErrInvalidConfig reports a bad URL parameter or option.
	ErrInvalidConfig = errors.New("postgres: invalid configuration")
)

// Ordering chooses how live queries avoid missing late commits; see the
// package documentation.
type Ordering int

const (
	// CommitOrder stamps events from the schema's clock row, serializing
	// write transactions so that events become visible in timestamp order.
	// The default.
	CommitOrder Ordering = iota
	// TimestampOrder lets writers run in parallel; live queries stay behind
	// the database clock and backtrack.
	TimestampOrder
)

func (o Ordering) String() string {
	if o == TimestampOrder {
		return "timestamp"
	}
	return "commit"
}

// Defaults of the options.
const (
	DefaultSchema            = "public"
	DefaultMaxPayloadSize    = 16 << 20
	DefaultPollInterval      = time.Second
	DefaultBehindCurrentTime = 100 * time.Millisecond
	DefaultBacktrackWindow   = 2 * time.Minute
	DefaultBacktrackBehind   = 10 * time.Second
	DefaultPageSize          = 1000
)

// Option configures Open.
type Option func(*config)

type config struct {
	schema            string
	migrate           bool
	ordering          Ordering
	maxPayload        int
	poll              time.Duration
	behind            time.Duration
	backtrackWindow   time.Duration
	backtrackBehind   time.Duration
	pageSize          int
	notify            bool
	layout            Layout
	orderingSet       bool   // ordering was given (URL or option), not defaulted
	beforeCommitSQL   string // tests: a statement run inside each write transaction before its commit
	clock             string // tests: SQL of TimestampOrder's write time (writeClock)
	poolConfigChanger func(*pgxpool.Config)
}

// WithSchema sets the schema of the store's tables (default "public"; the
// URL parameter schema= sets it too). It must be an unquoted identifier:
// a letter or underscore, then letters, digits or underscores, at most 63.
func WithSchema(name string) Option { return func(c *config) { c.schema = name } }

// WithMigrate makes Open create or upgrade the schema (URL: migrate=true).
func WithMigrate(on bool) Option { return func(c *config) { c.migrate = on } }

// WithOrdering chooses the live-query ordering (URL: ordering=commit or
// ordering=timestamp). All processes writing one schema must use the same.
func WithOrdering(o Ordering) Option {
	return func(c *config) { c.ordering, c.orderingSet = o, true }
}

// WithMaxPayloadSize sets the largest event or snapshot payload accepted, in
// bytes (default 16 MiB); larger writes are rejected.
func WithMaxPayloadSize(n int) Option { return func(c *config) { c.maxPayload = n } }

// WithPollInterval sets how often live queries poll when no notification
// wakes them (default 1s).
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.poll = d } }

// WithBehindCurrentTime sets how far behind the database clock live queries
// read in TimestampOrder, and live durable-state change queries in either
// ordering (default 100ms; URL: behind_current_time=100ms).
func WithBehindCurrentTime(d time.Duration) Option { return func(c *config) { c.behind = d } }

// WithBacktracking sets the backtracking query's window (how far behind the
// live position it starts, default 2m) and how far behind the database
// clock it reads (default 10s), for live queries in TimestampOrder and
// live durable-state change queries in either ordering. A transaction
// that commits later than that distance after its timestamp can be missed.
func WithBacktracking(window, behind time.Duration) Option {
	return func(c *config) { c.backtrackWindow, c.backtrackBehind = window, behind }
}

// WithPageSize sets how many rows a query reads per round trip (default
// 1000).
func WithPageSize(n int) Option { return func(c *config) { c.pageSize = n } }

// WithNotify turns NOTIFY after each write off or on (default on; URL:
// notify=false). Without it, live queries in other processes wait for
// their poll interval.
func WithNotify(on bool) Option { return func(c *config) { c.notify = on } }

// WithPoolConfig lets the caller adjust pgx's pool configuration (tracing,
// TLS, hooks) after the URL was parsed.
func WithPoolConfig(f func(*pgxpool.Config)) Option {
	return func(c *config) { c.poolConfigChanger = f }
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidIdentifier reports whether name is accepted as a schema name.
func ValidIdentifier(name string) bool { return identifier.MatchString(name) }

// Store is a PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	cfg     config
	layout  layout       // the schema's layout: set by Open (useLayout)
	sql     statements   // the layout's statements
	signal  query.Signal // local commits and NOTIFY wake live queries
	channel string       // the NOTIFY channel of the schema
	known   *knownStamps // TimestampOrder: the ids' last db_timestamps this store wrote

	closed     atomic.Bool
	errs       journal.StoreErrors // maps every error of the driver
	listenMu   sync.Mutex
	stopListen context.CancelFunc // ends the LISTEN goroutine; nil until a live query starts it
	listenDone chan struct{}
}

// Open connects to the PostgreSQL server of a postgres:// (or postgresql://)
// URL and opens the Annals store in its schema.
//
// Besides pgx's own parameters (pool_max_conns, pool_min_conns,
// sslmode, sslrootcert, sslcert, sslkey, connect_timeout, and any server
// setting such as statement_timeout=5s, passed to the server), the URL may
// carry Annals' parameters, which are removed before pgx sees it: schema,
// migrate (true/false), ordering (commit/timestamp), layout
// (annals/r2dbc/detect, see Layout), behind_current_time,
// poll_interval (Go durations), notify (true/false). Options given to Open
// override the URL.
//
// Open fails with ErrUnreachable when the server does not answer,
// ErrSchemaMissing when the schema has no Annals tables (unless migrating),
// ErrNewerSchema, ErrNotAnnals, or ErrWrongLayout when the schema holds
// another layout than the one asked for; it changes nothing in those
// cases.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	s, err := connect(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	if s.cfg.migrate {
		var layout Layout
		if _, layout, err = s.migrateLayout(ctx); err == nil {
			err = s.useLayout(layout)
		}
	} else {
		err = s.checkSchema(ctx)
	}
	if err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

// connect parses the configuration and connects, without looking at the
// schema.
func connect(ctx context.Context, dsn string, opts []Option) (*Store, error) {
	cfg := config{
		schema: DefaultSchema, maxPayload: DefaultMaxPayloadSize, poll: DefaultPollInterval,
		behind: DefaultBehindCurrentTime, backtrackWindow: DefaultBacktrackWindow,
		backtrackBehind: DefaultBacktrackBehind, pageSize: DefaultPageSize, notify: true,
	}
	rest, err := parseURL(dsn, &cfg)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if cfg.poolConfigChanger != nil {
		cfg.poolConfigChanger(pc)
	}
	afterConnect := pc.AfterConnect // the caller's, run after ours
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		registerCells(conn.TypeMap())
		if afterConnect != nil {
			return afterConnect(ctx, conn)
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) { // the server answered: a login or database error
			return nil, fmt.Errorf("postgres: connect to %s:%d as %s: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.User, err)
		}
		// A client certificate out of its validity is named whatever the
		// server's answer looked like: with TLS 1.3 the server refuses it
		// after the client's handshake is done, and its alert may be lost
		// to a reset of the connection.
		invalid := invalidClientCertificate(pc.ConnConfig.TLSConfig, time.Now())
		if tlsRefused(err) || invalid != "" { // the server answered, its certificate or ours refused
			return nil, fmt.Errorf("postgres: TLS with %s:%d failed (check sslrootcert, sslcert, sslkey and sslmode): %s%w", pc.ConnConfig.Host, pc.ConnConfig.Port, invalid, err)
		}
		return nil, fmt.Errorf("%w at %s:%d (is it running? scripts/services up postgres starts a local one): %v", ErrUnreachable, pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	s := &Store{pool: pool, cfg: cfg, channel: channelName(cfg.schema), known: newKnownStamps()}
	s.errs = journal.StoreErrors{Store: "postgres", Closed: s.isClosed}
	return s, nil
}

// invalidClientCertificate describes, followed by ": ", the client
// certificate of tc when it is not valid at now (expired, or not valid
// yet); "" when it is valid, or tc has none.
func invalidClientCertificate(tc *tls.Config, now time.Time) string {
	if tc == nil || len(tc.Certificates) == 0 {
		return ""
	}
	leaf := tc.Certificates[0].Leaf
	if leaf == nil && len(tc.Certificates[0].Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(tc.Certificates[0].Certificate[0])
	}
	const at = "2006-01-02 15:04:05 MST"
	switch {
	case leaf == nil:
		return ""
	case now.After(leaf.NotAfter):
		return fmt.Sprintf("the client certificate %s (sslcert) expired on %s: ", leaf.Subject, leaf.NotAfter.UTC().Format(at))
	case now.Before(leaf.NotBefore):
		return fmt.Sprintf("the client certificate %s (sslcert) is not valid before %s: ", leaf.Subject, leaf.NotBefore.UTC().Format(at))
	}
	return ""
}

// tlsRefused reports whether err is a TLS handshake's refusal: a server
// certificate that does not verify, or an alert the server sent (such as
// a client certificate it refused).
func tlsRefused(err error) bool {
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var remote *net.OpError // an alert the server sent: "remote error: tls: expired certificate"
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &unknownCA) ||
		errors.As(err, &hostname) || errors.As(err, &invalid) || (errors.As(err, &remote) && remote.Op == "remote error")
}

// notifyParam is the parameter of the NOTIFY channel in insert
// statements that take before parameters ahead of it (send appends the
// channel last): the one after them, "" without notify.
func (c *config) notifyParam(before int) string {
	if !c.notify {
		return ""
	}
	return fmt.Sprintf("$%d", before+1)
}

// writeClock is the SQL of the time TimestampOrder's writes stamp their
// rows from: transaction_timestamp(), unless a test set another.
func (c *config) writeClock() string {
	if c.clock != "" {
		return c.clock
	}
	return "transaction_timestamp()"
}

func (c *config) validate() error {
	switch {
	case !ValidIdentifier(c.schema):
		return fmt.Errorf("%w: schema %q is not a plain identifier (letters, digits, underscores; not starting with a digit; at most 63)", ErrInvalidConfig, c.schema)
	case c.maxPayload <= 0:
		return fmt.Errorf("%w: max payload size %d", ErrInvalidConfig, c.maxPayload)
	case c.poll <= 0:
		return fmt.Errorf("%w: poll interval %v", ErrInvalidConfig, c.poll)
	case c.behind < 0 || c.backtrackBehind < 0 || c.backtrackWindow < 0:
		return fmt.Errorf("%w: negative live-query distance", ErrInvalidConfig)
	case c.pageSize <= 0:
		return fmt.Errorf("%w: page size %d", ErrInvalidConfig, c.pageSize)
	case c.ordering != CommitOrder && c.ordering != TimestampOrder:
		return fmt.Errorf("%w: ordering %d", ErrInvalidConfig, c.ordering)
	case c.layout < LayoutDetect || c.layout > LayoutR2DBC:
		return fmt.Errorf("%w: layout %d", ErrInvalidConfig, c.layout)
	}
	return nil
}

// parseURL takes Annals' parameters out of dsn into cfg and returns the
// rest for pgx.
func parseURL(dsn string, cfg *config) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("%w: %q is not a postgres:// URL", ErrInvalidConfig, redact(dsn))
	}
	q := u.Query()
	take := func(name string) (string, bool) {
		v, ok := q[name]
		if !ok {
			return "", false
		}
		q.Del(name)
		return v[len(v)-1], true
	}
	durationParam := func(name string, dst *time.Duration) error {
		if v, ok := take(name); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%w: %s=%q: %v", ErrInvalidConfig, name, v, err)
			}
			*dst = d
		}
		return nil
	}
	boolParam := func(name string, dst *bool) error {
		if v, ok := take(name); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%w: %s=%q is not true or false", ErrInvalidConfig, name, v)
			}
			*dst = b
		}
		return nil
	}
	if v, ok := take("schema"); ok {
		cfg.schema = v
	}
	if v, ok := take("ordering"); ok {
		switch v {
		case "commit":
			cfg.ordering = CommitOrder
		case "timestamp":
			cfg.ordering = TimestampOrder
		default:
			return "", fmt.Errorf("%w: ordering=%q (want commit or timestamp)", ErrInvalidConfig, v)
		}
		cfg.orderingSet = true
	}
	if v, ok := take("layout"); ok {
		l, err := parseLayout(v)
		if err != nil {
			return "", err
		}
		cfg.layout = l
	}
	for _, err := range []error{
		boolParam("migrate", &cfg.migrate), boolParam("notify", &cfg.notify),
		durationParam("behind_current_time", &cfg.behind), durationParam("poll_interval", &cfg.poll),
	} {
		if err != nil {
			return "", err
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redact hides a password in a URL for messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// lockKey derives the schema's advisory-lock key (FNV-1a of a name).
func lockKey(schema string) int64 {
	h := uint64(14695981039346656037)
	for _, b := range []byte("annals.journal." + schema) {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return int64(h)
}

// Pool returns the store's pgx pool, for read models that share the
// database. Closing the store closes it.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema the store's tables are in.
func (s *Store) Schema() string { return s.cfg.schema }

// Ordering returns the store's live-query ordering.
func (s *Store) Ordering() Ordering { return s.cfg.ordering }

// Close stops live queries' notification listener and closes the pool.
// Calls after Close fail with the packages' ErrClosed errors.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.listenMu.Lock()
	stop, done := s.stopListen, s.listenDone
	s.listenMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	s.signal.Notify() // wake live queries so they see the close
	s.pool.Close()
	return nil
}

func (s *Store) isClosed() bool { return s.closed.Load() }

// table returns the quoted, schema-qualified name of one of the store's
// tables.
func table(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }
