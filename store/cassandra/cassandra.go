// Package cassandra is the Apache Cassandra store: a journal and a snapshot
// store in one keyspace, through the Apache project's Go driver
// (github.com/apache/cassandra-gocql-driver/v2).
//
// The tables are akka-persistence-cassandra's (as Pekko Persistence
// Cassandra 1.1 creates them), with the same names, columns and keys, so
// that a Pekko service and an Annals service can share a keyspace:
// messages partitioned by (persistence_id, partition_nr), metadata
// (deleted_to), all_persistence_ids, snapshots, and the tables of events
// by tag (tag_views, tag_write_progress, tag_scanning). Schema creates
// them; what Annals adds is listed in docs/cassandra.md.
//
// # Partitions and atomic writes
//
// An id's events are spread over partitions of PartitionSize sequence
// numbers (akka's target-partition-size, 500,000 by default): partition
// (seq-1)/PartitionSize. An atomic write is stored in ONE partition, the
// partition of its first event, in one batch, so that a replay never sees
// half of it; a write that crosses a boundary makes that partition a
// little larger than the target (akka does the same, putting such a write
// in the partition of its last event; replay reads both layouts). An
// atomic write may not hold more events than PartitionSize, and must fit
// the cluster's limits on a batch and a mutation (batch_size_fail_threshold,
// max_mutation_size): a write the server refuses as invalid is rejected,
// with the server's message, and nothing of it is stored.
//
// # Numbers far apart
//
// A replay (Annals' and Pekko's alike) reads an id's partitions from the
// one of its deleted-to mark, or of the first number wanted, up to the
// first empty partition after it; so does HighestSequenceNr. A write must
// therefore land where that scan reaches, and Write keeps to these rules,
// checked when Annals first writes into a partition of the id (reading the
// id's partitions as HighestSequenceNr does):
//
//   - An id that keeps no events (never written, or every event deleted)
//     may go on at any number above its deleted-to mark. When such a write
//     is the first by Annals into its partition and does not start at the
//     number after the mark (or at 1), Write first records the mark at the
//     number before it, a deletion of nothing; replays and
//     HighestSequenceNr then start there, in Annals and in Pekko (whose
//     replays would otherwise wait for the missing numbers, and fail). A
//     journal copied from a store where its first events were deleted is
//     written so.
//   - An id that keeps events may go on in the partition of its highest
//     number or in the next one. A write whose first number lies further
//     (which would leave an empty partition between, so that no replay
//     would ever read it) is rejected with an error wrapping
//     journal.ErrInvalidArgument that names the partitions, and nothing of
//     it is stored.
//
// Writers number an id's events consecutively, so neither happens to an
// entity; the rules are for copies and for writers that skip numbers. A
// gap that stays within those partitions is stored as written: Annals
// replays it, Pekko's replays wait for the missing numbers. Events written
// by other means (Pekko's writers, or Annals before these rules) beyond an
// empty partition stay unread.
//
// # Conflicts
//
// A second writer of a stored (persistence id, sequence number) gets a
// *journal.ConflictError, never a silent overwrite. Two guards do it;
// every process writing a keyspace must use the same one, since neither
// sees the other's writers, so the keyspace records its guard at its
// first open (WithWriteGuard): GuardClaims for a keyspace Annals creates,
// GuardConditional for one that already held events.
//
// GuardClaims costs one lightweight transaction per id and process rather
// than one per write. Before its first write of an id, a
// store claims it (claims.go has the steps): a conditional update of the
// id's row in annals_claims gives the id a new owner token and a fence
// (a write timestamp at or above the earlier owner's bound); the store
// then reads the id's highest number H at a quorum, publishes H with a
// second conditional update, and writes a range tombstone at the fence's
// timestamp over the numbers above H. Its writes are then plain batches
// stamped between the fence and the claim's bound (moved on by a
// conditional update once half of DefaultClaimLease is used), each
// acknowledged once a quorum read finds the claim's token still in the
// row. So:
//   - A write acknowledged under a claim was stored before any later
//     claim was taken, and every later claim's H includes it.
//   - A write a writer sends after its claim was taken (a paused or
//     partitioned process) is stamped below the new claim's fence, lies
//     above its H, and the tombstone hides it from every reader, Annals'
//     and Pekko's alike; the writer is told so (a *journal.ConflictError)
//     when its rows are hidden, or that they were kept when the new claim
//     found them, or ErrSuperseded when it cannot tell before its context
//     ends.
//   - Rows of such a write that land after the new owner read H and
//     before its tombstone (milliseconds; until the next claim when the
//     new owner stops in between) are visible to every reader until then.
//     A recovery's tag repair writes tag rows only for rows no claim can
//     hide later: the id's claim record, read before and after the rows,
//     and each row's write timestamp tell which (rows covered by a
//     completed claim's H, or stamped above the current claim's fence);
//     the rest wait for a later repair. (A write's repair reads only rows
//     below that write, stored for good.) A recovery stops before rows a completed
//     claim hides (and writes that claim's tombstone again); rows of a
//     claim being taken it reads, and a write built on them that the
//     claim then hid is refused (a lower highest number, or another row
//     at it), unless the process dropped the id's state in between (past
//     100,000 ids). The recovery that meets a claim being taken whose
//     bound passed (its owner stopped) takes the id itself, which settles
//     the rows. DeleteTo claims the id as a write does, so the deleted-to
//     mark lies within what a completed claim read.
//   - A write of a number at or below the claim's H (a writer that
//     recovered before another wrote on) is refused before anything is
//     sent.
//
// The claim protocol, the events' batches, the deleted-to mark and the
// reads of a repair that settles rows take a quorum (LOCAL_QUORUM, or
// QUORUM with SERIAL) whatever the read and write consistency. A claim's
// timestamps run ahead of the clock by up to DefaultClaimLease after it
// took an id from a live owner, and a lease more for each such takeover
// in a row; DeleteTo stamps its range deletions DefaultClaimLease × 4
// ahead, or at the bound of the id's claim when that is further.
//
// GuardConditional puts the first event of every atomic write IF NOT
// EXISTS (a lightweight transaction), and the rest of the write in the
// same conditional batch of the same partition, so either the whole
// write is stored or, when the first number is taken, none of it. Writers
// number an id's events consecutively, so a writer that reuses any stored
// number reuses the first number of its write too (two writers that
// start from the same highest number choose the same first number and the
// same partition).
//
// Numbers removed by DeleteTo are not guarded by GuardConditional: a
// writer that recovered before a deletion (or before a mark a far write
// recorded; see Numbers far apart) and writes below the deleted-to mark
// afterwards is not detected, and its events stay hidden below the mark;
// GuardClaims refuses such a write. Pekko's writers use neither guard; a
// Pekko writer overwrites silently, as it always has.
//
// # Tags
//
// The messages table keeps an event's tags in a set<text> (akka's column):
// they are returned sorted, not in the order written.
package cassandra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

var (
	// ErrUnreachable reports a cluster Open could not connect to.
	ErrUnreachable = errors.New("cassandra: cluster unreachable")
	// ErrSchemaMissing reports a keyspace without the store's tables; run
	// Migrate (or open WithMigrate, or `annals init`).
	ErrSchemaMissing = errors.New("cassandra: Annals tables missing")
	// ErrInvalidConfig reports a bad URL, URL parameter or option.
	ErrInvalidConfig = errors.New("cassandra: invalid configuration")
	// ErrAuthentication reports a cluster that refused the store's
	// credentials, or asked for credentials the store was not given.
	ErrAuthentication = errors.New("cassandra: authentication refused")
)

// Defaults of the options.
const (
	DefaultKeyspace       = "pekko"
	DefaultPort           = 9042
	DefaultPartitionSize  = 500_000
	DefaultMaxPayloadSize = 4 << 20
	DefaultPageSize       = 1000
	DefaultTimeout        = 10 * time.Second
	DefaultConcurrency    = 256
	DefaultReplication    = "{'class': 'SimpleStrategy', 'replication_factor': 1}"
	DefaultConsistency    = gocql.LocalQuorum
	// DefaultSerialConsistency is the consistency of the Paxos rounds of
	// lightweight transactions (the guard of every atomic write, durable
	// state, membership): LOCAL_SERIAL, a quorum of the local
	// datacenter's replicas.
	DefaultSerialConsistency = gocql.LocalSerial
	// DefaultBucketSize is the span of a tag_views partition when neither
	// the keyspace nor the options name one (Pekko's default).
	DefaultBucketSize = Hour
	// DefaultEventualConsistencyDelay is how old a tag_views row must be
	// before events by tag returns it (Pekko's eventual-consistency-delay).
	DefaultEventualConsistencyDelay = 5 * time.Second
	// DefaultGapTimeout is how long events by tag searches for a missing
	// tag sequence number before it fails (Pekko's gap-timeout).
	DefaultGapTimeout = 10 * time.Second
	// DefaultPollInterval is how often a live tag or persistence-ids
	// query reads the tables again when nothing in this process woke it.
	DefaultPollInterval = 500 * time.Millisecond
)

// DefaultFirstTimeBucket is where events by tag from no offset starts
// (Pekko's first-time-bucket, 20151120T00:00).
var DefaultFirstTimeBucket = time.Date(2015, 11, 20, 0, 0, 0, 0, time.UTC)

// Option changes a setting of Open.
type Option func(*config)

type config struct {
	hosts         []string
	keyspace      string
	replication   string
	readCL        gocql.Consistency
	writeCL       gocql.Consistency
	serialCL      gocql.Consistency // of lightweight transactions' Paxos rounds
	partitionSize int64
	maxPayload    int
	pageSize      int
	timeout       time.Duration
	concurrency   int
	migrate       bool
	bucketSize    BucketSize // 0: the keyspace's, or DefaultBucketSize
	firstBucket   time.Time
	ecDelay       time.Duration
	gapTimeout    time.Duration
	pollInterval  time.Duration
	now           func() time.Time
	observer      gocql.QueryObserver
	sec           security
	scanFlush     time.Duration // how often tag_scanning marks move (scanningFlushInterval; tests change it)
	guard         WriteGuard
	claimLease    time.Duration // DefaultClaimLease; tests change it
	// afterClaimedRows runs after a claimed write's rows are stored,
	// before the claim is read again (tests: a writer paused there).
	afterClaimedRows func(pid string)
}

func defaultConfig() config {
	return config{
		keyspace: DefaultKeyspace, replication: DefaultReplication,
		readCL: DefaultConsistency, writeCL: DefaultConsistency, serialCL: DefaultSerialConsistency,
		partitionSize: DefaultPartitionSize, maxPayload: DefaultMaxPayloadSize,
		pageSize: DefaultPageSize, timeout: DefaultTimeout, concurrency: DefaultConcurrency,
		firstBucket: DefaultFirstTimeBucket, ecDelay: DefaultEventualConsistencyDelay,
		gapTimeout: DefaultGapTimeout, pollInterval: DefaultPollInterval, now: time.Now,
		scanFlush: scanningFlushInterval, claimLease: DefaultClaimLease,
	}
}

// WithBucketSize sets the span of a tag_views partition (Pekko's
// events-by-tag.bucket-size). The first Open of a keyspace records it; a
// later Open with a different size fails with ErrInvalidConfig, since rows
// already written would no longer be found. Without this option, Open uses
// the size the keyspace records, or DefaultBucketSize for a new one.
func WithBucketSize(b BucketSize) Option { return func(c *config) { c.bucketSize = b } }

// WithFirstTimeBucket sets where events by tag from no offset starts
// reading (Pekko's first-time-bucket): no event tagged before it is
// returned from no offset. Buckets without rows are skipped a hundred at a
// time, but set it close to the first tagged event when buckets are
// minutes.
func WithFirstTimeBucket(t time.Time) Option { return func(c *config) { c.firstBucket = t.UTC() } }

// WithEventualConsistencyDelay sets how old a tag_views row must be before
// events by tag returns it (default 5 s): rows of concurrent writers become
// visible in any order, and a query that has passed a time does not look
// back. It is the floor of a live tag query's lag; 0 is for tests.
func WithEventualConsistencyDelay(d time.Duration) Option {
	return func(c *config) { c.ecDelay = d }
}

// WithGapTimeout sets how long events by tag searches for a missing tag
// sequence number of a persistence id before it fails with a
// *MissingEventsError (default 10 s).
func WithGapTimeout(d time.Duration) Option { return func(c *config) { c.gapTimeout = d } }

// WithPollInterval sets how often live tag, persistence-id and
// persistence-ids queries read again when no write in this process woke
// them (default 500 ms).
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// WithQueryObserver sets the driver's observer of every query the store
// runs (statement, values, duration, error), for metrics and tracing.
func WithQueryObserver(o gocql.QueryObserver) Option { return func(c *config) { c.observer = o } }

// WithClock replaces time.Now for the store: the time of events written
// without one, the current time bucket, the eventual-consistency bound and
// the gap timeout, and the write timestamps of claims (see Conflicts).
// For tests.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithMigrate creates the keyspace and tables on Open when they are
// missing (default false: Open refuses a keyspace without them).
func WithMigrate(on bool) Option { return func(c *config) { c.migrate = on } }

// WithPartitionSize sets the number of sequence numbers per messages
// partition (akka's target-partition-size, default 500,000). It must be the
// same for every writer of a keyspace and never change once events are
// written.
func WithPartitionSize(n int64) Option { return func(c *config) { c.partitionSize = n } }

// WithMaxPayloadSize sets the largest payload (and metadata) an event may
// have, in bytes (default 4 MiB); a larger event's write is rejected.
func WithMaxPayloadSize(n int) Option { return func(c *config) { c.maxPayload = n } }

// WithPageSize sets how many rows a read fetches per round trip (default
// 1,000).
func WithPageSize(n int) Option { return func(c *config) { c.pageSize = n } }

// WithTimeout sets the driver's per-request timeout (default 10 s).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithConsistency sets the consistency of reads and of writes (default
// LOCAL_QUORUM for both, as akka-persistence-cassandra).
func WithConsistency(read, write gocql.Consistency) Option {
	return func(c *config) { c.readCL, c.writeCL = read, write }
}

// WithSerialConsistency sets the consistency of the Paxos rounds of the
// store's lightweight transactions (default LOCAL_SERIAL): gocql.Serial
// (a quorum of all replicas, across datacenters) or gocql.LocalSerial (a
// quorum of the local datacenter's). Any other value fails Open with
// ErrInvalidConfig.
func WithSerialConsistency(cl gocql.Consistency) Option {
	return func(c *config) { c.serialCL = cl }
}

// WithReplication sets the replication map used when Migrate creates the
// keyspace (CQL, default SimpleStrategy with replication factor 1).
func WithReplication(cql string) Option { return func(c *config) { c.replication = cql } }

var keyspaceName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,47}$`)

// ValidKeyspace reports whether name is a keyspace name the store accepts:
// a letter, then up to 47 letters, digits or underscores (Cassandra's rule
// for unquoted names).
func ValidKeyspace(name string) bool { return keyspaceName.MatchString(name) }

// Store is an open Cassandra store. Its methods are safe for concurrent
// use.
type Store struct {
	cfg     config
	session *gocql.Session
	closed  atomic.Bool
	errs    journal.StoreErrors // maps every error of the driver
	sql     statements
	bucket  BucketSize
	tags    *tagWriters
	signal  query.Signal // notified after tag rows are written
	written query.Signal // notified after events are written
}

// Open connects to the cluster the URL names and checks the keyspace:
//
//	cassandra://host[:port][,host[:port]...]/keyspace?param=value...
//
// A host without a port gets DefaultPort; all hosts share one port. An
// IPv6 address is written in brackets: [fd00::1] or [fd00::1]:9042.
//
// Parameters: bucket_size (Day, Hour or Minute), first_time_bucket
// (Pekko's form, 20151120T00:00, in UTC), eventual_consistency_delay,
// gap_timeout, poll_interval (Go durations), consistency (read and write),
// read_consistency,
// write_consistency (any, one, two, three, quorum, all, local_quorum,
// each_quorum, local_one), serial_consistency (of the Paxos rounds of
// lightweight transactions: serial or local_serial, the default),
// write_guard (claims or conditional; the keyspace's by default, see
// WithWriteGuard),
// partition_size, page_size, timeout (a Go
// duration), replication (the keyspace's replication map for Migrate, e.g.
// "{'class':'NetworkTopologyStrategy','dc1':3}"), or the shorthand
// replication_factor=N for SimpleStrategy; and for a secured cluster the
// URL's user info (user:password@), password_file (a file whose first line
// is the password; else PasswordEnv is read when the URL names a user
// without a password), tls=true, tls_ca, tls_cert, tls_key (PEM files),
// tls_server_name, tls_verify_host=false (check the chain, not the names),
// and local_dc (the datacenter whose nodes take requests first). Options
// given to Open override the URL. The port defaults to 9042, the keyspace
// to "pekko"; every host has the same port (the driver also connects to
// the nodes it finds, on that port). Requests go to a replica of their
// partition first (token-aware routing).
//
// The store outlives restarts of the nodes: while no node answers, calls
// fail fast with the driver's error; once one answers again, they work
// again within seconds, in the same process.
//
// Open fails with ErrUnreachable when no host answers (or the TLS
// handshake fails, the reason in the message), ErrAuthentication when the
// cluster refuses the credentials or wants some, ErrSchemaMissing when the
// keyspace lacks the store's tables (unless WithMigrate), and
// ErrInvalidConfig for a bad URL or option. No error holds the password.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	s, err := dial(ctx, rawURL, opts)
	if err != nil {
		return nil, err
	}
	session := s.session
	if s.cfg.migrate {
		if err := s.migrate(ctx); err != nil {
			session.Close()
			return nil, err
		}
	}
	if err := s.checkSchema(ctx); err != nil {
		session.Close()
		return nil, err
	}
	if err := s.fixBucketSize(ctx); err != nil {
		session.Close()
		return nil, err
	}
	if err := s.fixWriteGuard(ctx); err != nil {
		session.Close()
		return nil, err
	}
	s.tags = newTagWriters(s)
	return s, nil
}

// dial reads the URL and options, and connects to the cluster without
// checking the keyspace.
func dial(ctx context.Context, rawURL string, opts []Option) (*Store, error) {
	cfg := defaultConfig()
	if err := parseURL(rawURL, &cfg); err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.sec.resolve(); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, sql: newStatements(cfg.keyspace)}
	s.errs = journal.StoreErrors{Store: "cassandra", Closed: s.isClosed}
	session, err := s.connect(ctx, "")
	if err != nil {
		return nil, err
	}
	s.session = session
	return s, nil
}

// connect opens a session; keyspace "" connects without one.
func (s *Store) connect(ctx context.Context, keyspace string) (*gocql.Session, error) {
	cluster := gocql.NewCluster(s.cfg.hosts...)
	cluster.Keyspace = keyspace
	cluster.Consistency = s.cfg.writeCL
	cluster.Timeout = s.cfg.timeout
	cluster.ConnectTimeout = s.cfg.timeout
	cluster.PageSize = s.cfg.pageSize
	cluster.SerialConsistency = s.cfg.serialCL
	cluster.ProtoVersion = 4
	cluster.QueryObserver = s.cfg.observer
	s.cfg.sec.apply(cluster)
	// The driver looks the cluster's nodes up (system.local, system.peers)
	// and connects to them on cluster.Port, the hosts' one port; so its
	// pools know each node by its host id. Without the lookup (the
	// driver's DisableInitialHostLookup, which the store once set for one
	// loopback host) a pool's host has an id of the driver's making: when
	// the node restarts, the control connection reconnects and adds the
	// node under its real id, and the ring refresh that follows removes
	// the made-up host, and with it the node from the host selection
	// policy (which forgets hosts by address); every call then failed with
	// "no hosts available in the pool" until the process restarted.
	port, err := commonPort(s.cfg.hosts)
	if err != nil {
		return nil, err
	}
	cluster.Port = port
	// Down nodes are tried again this often (the driver's default is a
	// minute); the control connection brings back a node it reconnects
	// to at once, this bounds the wait when that first attempt fails.
	cluster.ReconnectInterval = reconnectInterval
	type result struct {
		session *gocql.Session
		err     error
	}
	done := make(chan result, 1)
	go func() {
		session, err := cluster.CreateSession()
		done <- result{session, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			cause := ErrUnreachable
			if authRefused(r.err) {
				cause = ErrAuthentication
			}
			return nil, fmt.Errorf("%w: %s: %w", cause, strings.Join(s.cfg.hosts, ","), r.err)
		}
		return r.session, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.session != nil {
				r.session.Close()
			}
		}()
		return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, strings.Join(s.cfg.hosts, ","), ctx.Err())
	}
}

// reconnectInterval is how often the driver tries to connect to the nodes
// it has marked down.
const reconnectInterval = 2 * time.Second

// commonPort returns the port of hosts (host:port each), which must be the
// same for all: the driver connects to every node of the cluster, found or
// given, on one port.
func commonPort(hosts []string) (int, error) {
	port := 0
	for _, h := range hosts {
		_, p, err := net.SplitHostPort(h)
		if err != nil {
			return 0, fmt.Errorf("%w: host %q: %w", ErrInvalidConfig, h, err)
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return 0, fmt.Errorf("%w: host %q: bad port", ErrInvalidConfig, h)
		}
		if port != 0 && n != port {
			return 0, fmt.Errorf("%w: hosts %s: the nodes of a cluster share one port", ErrInvalidConfig, strings.Join(hosts, ","))
		}
		port = n
	}
	return port, nil
}

// Keyspace returns the store's keyspace.
func (s *Store) Keyspace() string { return s.cfg.keyspace }

// Session returns the driver session, for tests and tools that read the
// tables directly.
func (s *Store) Session() *gocql.Session { return s.session }

// PartitionSize returns the number of sequence numbers per messages
// partition.
func (s *Store) PartitionSize() int64 { return s.cfg.partitionSize }

// Close writes the tag_scanning marks of the ids this process wrote
// (within the store's timeout; see the package documentation), then
// closes the session, and returns the marks' error, if any: nothing is
// lost without them, a later recovery rereads more. Calls after Close
// fail with journal.ErrClosed or snapshot.ErrClosed. Closing twice is not
// an error.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	// The ids' tag_scanning marks, so that their next recoveries reread
	// only what this process did not write.
	var err error
	if s.tags != nil { // a Migrator's store writes no tags
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
		err = s.tags.close(ctx)
		cancel()
	}
	s.session.Close()
	return err
}

func (s *Store) isClosed() bool { return s.closed.Load() }

func (c *config) validate() error {
	switch {
	case len(c.hosts) == 0:
		return fmt.Errorf("%w: no host", ErrInvalidConfig)
	case !ValidKeyspace(c.keyspace):
		return fmt.Errorf("%w: keyspace %q (want a letter, then up to 47 letters, digits or underscores)", ErrInvalidConfig, c.keyspace)
	case c.partitionSize <= 0:
		return fmt.Errorf("%w: partition size %d", ErrInvalidConfig, c.partitionSize)
	case c.maxPayload <= 0:
		return fmt.Errorf("%w: max payload size %d", ErrInvalidConfig, c.maxPayload)
	case c.pageSize <= 0:
		return fmt.Errorf("%w: page size %d", ErrInvalidConfig, c.pageSize)
	case c.timeout <= 0:
		return fmt.Errorf("%w: timeout %v", ErrInvalidConfig, c.timeout)
	case c.concurrency <= 0:
		return fmt.Errorf("%w: concurrency %d", ErrInvalidConfig, c.concurrency)
	case c.bucketSize != 0 && c.bucketSize.Duration() == 0:
		return fmt.Errorf("%w: bucket size %d (want Day, Hour or Minute)", ErrInvalidConfig, c.bucketSize)
	case c.ecDelay < 0:
		return fmt.Errorf("%w: eventual consistency delay %v", ErrInvalidConfig, c.ecDelay)
	case c.gapTimeout < 0:
		return fmt.Errorf("%w: gap timeout %v", ErrInvalidConfig, c.gapTimeout)
	case c.pollInterval <= 0:
		return fmt.Errorf("%w: poll interval %v", ErrInvalidConfig, c.pollInterval)
	case c.now == nil:
		return fmt.Errorf("%w: no clock", ErrInvalidConfig)
	case strings.TrimSpace(c.replication) == "":
		return fmt.Errorf("%w: empty replication", ErrInvalidConfig)
	case c.serialCL != gocql.Serial && c.serialCL != gocql.LocalSerial:
		return fmt.Errorf("%w: serial consistency %v (want SERIAL or LOCAL_SERIAL)", ErrInvalidConfig, c.serialCL)
	case c.guard != 0 && c.guard != GuardClaims && c.guard != GuardConditional:
		return fmt.Errorf("%w: write guard %v (want GuardClaims or GuardConditional)", ErrInvalidConfig, c.guard)
	case c.claimLease <= 0:
		return fmt.Errorf("%w: claim lease %v", ErrInvalidConfig, c.claimLease)
	}
	_, err := commonPort(c.hosts)
	return err
}

// wantURL says what a store URL looks like, for errors that cannot show
// the URL given.
const wantURL = "want cassandra://[user[:password]@]host:port/keyspace, with a password's reserved characters percent-encoded"

// contactPoints splits the host list out of a cassandra:// URL: it returns
// the URL with its hosts replaced by the first one, which url.Parse
// accepts (it takes no list, and refuses one of bracketed IPv6 literals),
// and each host as host:port, with the default port where it names none.
// The user info ends at the last @ before the query, as Redact finds it, so
// a password with an unescaped /, # or , is never read as hosts; and when
// the URL has user info, no error quotes a host.
func contactPoints(raw string) (string, []string, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw, nil, nil // url.Parse names the problem
	}
	query := strings.IndexByte(rest, '?')
	if query < 0 {
		query = len(rest)
	}
	at := strings.LastIndex(rest[:query], "@") + 1
	end := strings.IndexAny(rest[at:], "/?#")
	if end < 0 {
		end = len(rest)
	} else {
		end += at
	}
	if at == 0 && strings.Contains(rest[end:], "@") {
		// An @ after the hosts, none before: user info whose password
		// holds an unescaped ?, which must not be read as hosts or
		// parameters (nor shown).
		return "", nil, fmt.Errorf("%w: the URL does not parse: %s", ErrInvalidConfig, wantURL)
	}
	var hosts []string
	first := ""
	for h := range strings.SplitSeq(rest[at:end], ",") {
		if h == "" {
			continue
		}
		if first == "" {
			first = h
		}
		hp, err := contactPoint(h)
		if err != nil {
			if at > 0 {
				return "", nil, fmt.Errorf("%w: a host of the URL: %w", ErrInvalidConfig, err)
			}
			return "", nil, fmt.Errorf("%w: host %q: %w", ErrInvalidConfig, h, err)
		}
		hosts = append(hosts, hp)
	}
	if len(hosts) == 0 {
		return raw, nil, nil
	}
	return scheme + "://" + rest[:at] + first + rest[end:], hosts, nil
}

// contactPoint checks one host of a URL (name, IPv4 address or bracketed
// IPv6 address, with an optional port) and returns it as host:port.
func contactPoint(h string) (string, error) {
	u, err := url.Parse("cassandra://" + h)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", err
	}
	if u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", errors.New("not a host or host:port")
	}
	name, port := u.Hostname(), u.Port()
	switch {
	case name == "":
		return "", errors.New("no host name")
	case strings.HasPrefix(h, "["):
		if _, err := netip.ParseAddr(name); err != nil {
			return "", fmt.Errorf("not an IPv6 address in brackets: %w", err)
		}
	case strings.Contains(name, ":"):
		return "", errors.New("an IPv6 address is written in brackets: [address] or [address]:port")
	}
	if port == "" {
		port = strconv.Itoa(DefaultPort)
	}
	return net.JoinHostPort(name, port), nil
}

func parseURL(raw string, cfg *config) error {
	single, hosts, err := contactPoints(raw)
	if err != nil {
		return err
	}
	u, err := url.Parse(single)
	if err != nil {
		// url.Error quotes the whole URL, and its cause may quote a part
		// of the password ("invalid port" of a password with a /): with
		// user info, neither is shown.
		var ue *url.Error
		if !strings.Contains(raw, "@") && errors.As(err, &ue) {
			return fmt.Errorf("%w: the URL does not parse (%w): %s", ErrInvalidConfig, ue.Err, wantURL)
		}
		return fmt.Errorf("%w: the URL does not parse: %s", ErrInvalidConfig, wantURL)
	}
	if u.Scheme != "cassandra" {
		return fmt.Errorf("%w: scheme %q (want cassandra://host:port/keyspace)", ErrInvalidConfig, u.Scheme)
	}
	cfg.hosts = append(cfg.hosts, hosts...)
	if ks := strings.Trim(u.Path, "/"); ks != "" {
		cfg.keyspace = ks
	}
	if u.User != nil {
		cfg.sec.username = u.User.Username()
		cfg.sec.password, _ = u.User.Password()
	}
	for name, values := range u.Query() {
		v := values[len(values)-1]
		bad := func(err error) error {
			return fmt.Errorf("%w: URL parameter %s=%q: %w", ErrInvalidConfig, name, v, err)
		}
		switch name {
		case "consistency", "read_consistency", "write_consistency":
			cl, err := parseConsistency(v)
			if err != nil {
				return bad(err)
			}
			if name != "write_consistency" {
				cfg.readCL = cl
			}
			if name != "read_consistency" {
				cfg.writeCL = cl
			}
		case "serial_consistency":
			switch strings.ToLower(v) {
			case "serial":
				cfg.serialCL = gocql.Serial
			case "local_serial":
				cfg.serialCL = gocql.LocalSerial
			default:
				return bad(errors.New("want serial or local_serial"))
			}
		case "write_guard":
			g, err := parseWriteGuard(strings.ToLower(v))
			if err != nil {
				return bad(err)
			}
			cfg.guard = g
		case "partition_size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return bad(err)
			}
			cfg.partitionSize = n
		case "page_size":
			n, err := strconv.Atoi(v)
			if err != nil {
				return bad(err)
			}
			cfg.pageSize = n
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return bad(err)
			}
			cfg.timeout = d
		case "replication":
			cfg.replication = v
		case "bucket_size":
			b, err := ParseBucketSize(v)
			if err != nil {
				return bad(err)
			}
			cfg.bucketSize = b
		case "first_time_bucket":
			t, err := time.Parse("20060102T15:04", v)
			if err != nil {
				return bad(errors.New("want the form 20151120T00:00"))
			}
			cfg.firstBucket = t
		case "eventual_consistency_delay", "gap_timeout", "poll_interval":
			d, err := time.ParseDuration(v)
			if err != nil {
				return bad(err)
			}
			switch name {
			case "eventual_consistency_delay":
				cfg.ecDelay = d
			case "gap_timeout":
				cfg.gapTimeout = d
			default:
				cfg.pollInterval = d
			}
		case "replication_factor":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return bad(errors.New("want a positive integer"))
			}
			cfg.replication = fmt.Sprintf("{'class': 'SimpleStrategy', 'replication_factor': %d}", n)
		default:
			known, err := parseSecurity(name, v, &cfg.sec)
			if err != nil {
				return bad(err)
			}
			if !known {
				return fmt.Errorf("%w: unknown URL parameter %q", ErrInvalidConfig, name)
			}
		}
	}
	return nil
}

func parseConsistency(v string) (gocql.Consistency, error) {
	switch strings.ToLower(v) {
	case "any":
		return gocql.Any, nil
	case "one":
		return gocql.One, nil
	case "two":
		return gocql.Two, nil
	case "three":
		return gocql.Three, nil
	case "quorum":
		return gocql.Quorum, nil
	case "all":
		return gocql.All, nil
	case "local_quorum":
		return gocql.LocalQuorum, nil
	case "each_quorum":
		return gocql.EachQuorum, nil
	case "local_one":
		return gocql.LocalOne, nil
	}
	return 0, fmt.Errorf("unknown consistency %q", v)
}
