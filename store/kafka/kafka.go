// Package kafka is the Kafka journal: Kafka is the write-ahead log of a
// journal's actions, a replicator copies them into an eventual store
// (Cassandra or PostgreSQL), and reads merge the eventual store with the
// topic's not yet replicated head. It follows the Scala Kafka Journal
// (evolution-gaming/kafka-journal) and shares its topics and its Cassandra
// keyspace: a Go service and a Scala one can write and read the same
// journals.
//
// # Writes
//
// An atomic write is one Append record keyed by the persistence id on its
// entity type's topic, its events in the Scala persistence adapter's
// binary form (serializer id, manifest, payload and writer id, as Akka and
// Pekko services using the Scala library write them). The producer is
// idempotent with acks=all: Write returns once every replica in sync has
// the record. Records of one id go to one partition (Kafka's murmur2 key
// hash, as the Java producer) and, because the idempotent producer numbers
// each partition's batches and the broker accepts them only in order, stay
// in the order produced even when a batch is retried. A write to a
// partition with fewer replicas in sync than its topic's
// min.insync.replicas (brokers down) fails within about a second with an
// error wrapping kerr.NotEnoughReplicas that names the partition, rather
// than being retried until its context ends; as with any write error,
// its outcome is unknown.
//
// Kafka cannot refuse an append whose sequence numbers are taken, so the
// journal checks each write against the highest number it knows for the
// id (read through the journal at the id's first write in this process).
// Like the Scala library it assumes one writer per id at a time (cluster
// sharding, or the entity host's single owner); two processes writing one
// id at once are not detected, unless their writes carry claims of the
// id's partition (Claim, WriteFenced: the brokers then refuse the
// earlier claim's records, as package kafkacluster's members use them).
//
// # Reads
//
// Replay, HighestSequenceNr and DeleteTo produce a Mark for the id, and
// read the partition's pointer and the id's head in the eventual store
// (in that order: the replicator moves the pointer after the heads) while
// the Mark is produced, once the journal knows the topic's partitions; when
// the store has applied everything up to the Mark (its pointer, or the
// id's own last offset, has reached it) Kafka is not read. Otherwise the
// id's actions from there to the Mark are folded in, its deletes and
// purges applied before anything is streamed; the head's events follow
// the store's, without duplicates at the seam.
//
// The unreplicated head comes from the head cache: one consumer per
// topic, started at each partition's pointer when the journal first reads
// the topic, holds the actions the eventual store has not applied yet
// (with the values of appends, up to DefaultHeadCacheBytes per topic),
// indexed by id, and drops them as the pointer passes them. All the
// recoveries of a partition share that one read, and a recovery's cost is
// that of its own id's actions, however far behind the replicator is. A
// read the cache cannot serve (a head longer than the cache holds, a
// cache that stopped moving for 2 s, WithHeadCache(0)) reads the
// partition itself, with Fetch requests of the journal's own client to
// the partition's leader, at most four such reads at once. A read whose
// context has no deadline is bounded by WithReadTimeout (default
// DefaultReadTimeout), and so is every record the journal produces.
//
// # Events written by other clients
//
// Events the Scala library's Journals API wrote (not its persistence
// adapter) have no serializer: their payloads are returned as described
// at [TextManifest].
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/kafka/eventual"
)

// Version is written as the version of the records Annals produces.
const Version = "annals"

// DefaultTopicPrefix starts the default topic of an entity type:
// "journal-" followed by the type ("journal" for ids without one).
const DefaultTopicPrefix = "journal-"

// DefaultMaxPayloadSize is the largest event payload a journal accepts by
// default: 960 KiB, which leaves room, under the producer's default batch
// limit of about 1 MB (franz-go's ProducerBatchMaxBytes) and the broker's
// default message.max.bytes of 1 MiB, for the rest of an Append record.
const DefaultMaxPayloadSize = 960 << 10

// ErrInvalidConfig reports options that cannot work.
var ErrInvalidConfig = errors.New("kafka journal: invalid configuration")

// Option configures a Journal.
type Option func(*config)

type config struct {
	topic       func(entityType string) string
	origin      string
	clientOpts  []kgo.Opt
	cacheSize   int
	cacheBytes  int
	snapshots   snapshot.Store
	expireAfter time.Duration
	maxPayload  int
	readTimeout time.Duration
}

// WithTopic sets the topic of each entity type (default DefaultTopicPrefix
// and the type). A topic must be a valid Kafka topic name.
func WithTopic(topic func(entityType string) string) Option {
	return func(c *config) { c.topic = topic }
}

// WithOrigin names this writer in its records' headers (default the host
// name).
func WithOrigin(origin string) Option { return func(c *config) { c.origin = origin } }

// WithClientOptions adds franz-go options to the journal's Kafka clients
// (TLS, SASL, timeouts).
func WithClientOptions(opts ...kgo.Opt) Option {
	return func(c *config) { c.clientOpts = append(c.clientOpts, opts...) }
}

// WithHeadCache sets how many actions the head cache keeps per topic
// partition (default DefaultHeadCacheEntries): a partition whose
// unreplicated head is longer is held from that many actions before its
// end. 0 turns the cache off, and every read whose head the eventual
// store has not applied reads the partition.
func WithHeadCache(entries int) Option { return func(c *config) { c.cacheSize = entries } }

// WithHeadCacheBytes bounds the bytes of Append values the head cache holds
// per topic (default DefaultHeadCacheBytes); past it, appends are held
// without their values, and a replay of their events reads the partition.
// The cache is the journal's one bounded buffer of unreplicated events: a
// replicator that lags fills it up to this bound.
func WithHeadCacheBytes(n int) Option { return func(c *config) { c.cacheBytes = n } }

// WithExpireAfter makes every append carry an expire-after of d (the
// Scala library's ExpireAfter): a journal with no append for d may be
// purged (PurgeExpired, or the replicator WithPurgeExpired), from the
// day its last append plus d falls on. 0 (the default) never expires.
func WithExpireAfter(d time.Duration) Option { return func(c *config) { c.expireAfter = d } }

// WithMaxPayloadSize sets the largest event payload, in bytes, that Write
// accepts (default DefaultMaxPayloadSize); an atomic write with a larger
// one is rejected before anything is produced, with an error wrapping
// journal.ErrInvalidArgument that names the event. An atomic write is
// one record, so all of its events together must also fit the
// producer's batch limit (ProducerBatchMaxBytes, through
// WithClientOptions) and the topic's max.message.bytes: a record either
// refuses is rejected too. Raise all three together.
func WithMaxPayloadSize(n int) Option { return func(c *config) { c.maxPayload = n } }

// WithReadTimeout bounds, when the caller's context has no deadline, each
// read's Mark, pointer, head and unreplicated head, and every record the
// journal produces (franz-go's RecordDeliveryTimeout, unless
// WithClientOptions sets another); default DefaultReadTimeout. A write
// whose records time out has an unknown outcome.
func WithReadTimeout(d time.Duration) Option { return func(c *config) { c.readTimeout = d } }

// DefaultTopic returns the default topic of an entity type.
func DefaultTopic(entityType string) string {
	if entityType == "" {
		return "journal"
	}
	return DefaultTopicPrefix + entityType
}

// validTopic reports whether t is a name Kafka accepts for a topic: 1 to
// 249 of letters, digits, '.', '_' and '-', and neither "." nor "..". It
// runs on every write and read of an id, so it is a loop, not a regular
// expression.
func validTopic(t string) bool {
	if len(t) == 0 || len(t) > 249 || t == "." || t == ".." {
		return false
	}
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Journal is the Kafka journal. It implements journal.Journal and is safe
// for concurrent use.
type Journal struct {
	cfg     config
	brokers []string
	tables  eventual.Tables
	cl      *kgo.Client
	cache   *headCache // nil when off

	headReads atomic.Int64  // reads of a partition's head (not from the cache)
	readers   chan struct{} // a slot per partition read in progress (headReaders)
	metas     fetchMetas    // topic ids and leaders, for reads of partitions (fetch.go)
	// decompressor decompresses the batches of reads of partitions.
	decompressor kgo.Decompressor

	mu    sync.Mutex
	known map[string]int64 // highest sequence number per id, as written or read here

	written query.Signal // notified after each write, for live queries

	replicas replicaStates // partitions short of replicas in sync (replicas.go)

	closed atomic.Bool
	errs   journal.StoreErrors // maps the errors of the eventual store's reads
}

// Open returns a journal on the Kafka cluster at brokers (host:port), with
// tables as its eventual store. It does not own tables. It fails when no
// broker answers, with an error saying so, or, when the brokers refuse the
// client's TLS certificate (or its want of one), saying which certificate
// they refused and what is wrong with it as far as the client can tell
// (none, expired, or its issuer).
func Open(ctx context.Context, brokers []string, tables eventual.Tables, opts ...Option) (*Journal, error) {
	cfg := config{topic: DefaultTopic, cacheSize: DefaultHeadCacheEntries, cacheBytes: DefaultHeadCacheBytes, maxPayload: DefaultMaxPayloadSize, readTimeout: DefaultReadTimeout}
	if h, err := os.Hostname(); err == nil {
		cfg.origin = h
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case len(brokers) == 0:
		return nil, fmt.Errorf("%w: no brokers", ErrInvalidConfig)
	case tables == nil:
		return nil, fmt.Errorf("%w: no eventual store", ErrInvalidConfig)
	case cfg.readTimeout <= 0:
		return nil, fmt.Errorf("%w: a read timeout of %v", ErrInvalidConfig, cfg.readTimeout)
	case cfg.maxPayload <= 0:
		return nil, fmt.Errorf("%w: a payload limit of %d bytes", ErrInvalidConfig, cfg.maxPayload)
	case cfg.cacheSize < 0:
		return nil, fmt.Errorf("%w: a head cache of %d entries", ErrInvalidConfig, cfg.cacheSize)
	case cfg.cacheBytes < 0:
		return nil, fmt.Errorf("%w: a head cache of %d bytes", ErrInvalidConfig, cfg.cacheBytes)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0), kgo.RecordDeliveryTimeout(cfg.readTimeout)}, cfg.clientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := cl.Ping(ctx); err != nil {
		tlsCfg, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config)
		cl.Close()
		if why := certificateRefusal(err, tlsCfg, time.Now()); why != "" {
			return nil, fmt.Errorf("kafka journal: the brokers at %v %s: %w", brokers, why, err)
		}
		return nil, fmt.Errorf("kafka journal: no broker at %v answers: %w", brokers, err)
	}
	j := &Journal{cfg: cfg, brokers: brokers, tables: tables, cl: cl, known: map[string]int64{}, readers: make(chan struct{}, headReaders),
		decompressor: kgo.DefaultDecompressor()}
	j.errs = journal.StoreErrors{Store: "kafka journal", Closed: j.closed.Load}
	if cfg.cacheSize > 0 {
		j.cache = newHeadCache(j, cfg.cacheSize, cfg.cacheBytes)
	}
	return j, nil
}

// Close releases the journal's Kafka clients; calls after Close fail with
// journal.ErrClosed.
func (j *Journal) Close() error {
	if j.closed.Swap(true) {
		return nil
	}
	if j.cache != nil {
		j.cache.close()
	}
	j.cl.Close()
	return nil
}

// key returns the journal key of pid, or an error naming a topic Kafka
// would refuse.
func (j *Journal) key(pid string) (eventual.Key, error) {
	t := j.cfg.topic(annals.EntityType(pid))
	if !validTopic(t) {
		return eventual.Key{}, fmt.Errorf("%w: persistence id %q maps to topic %q, which is not a Kafka topic name (letters, digits, '.', '_', '-'; 249 at most): set WithTopic",
			journal.ErrInvalidArgument, pid, t)
	}
	return eventual.Key{ID: pid, Topic: t}, nil
}

func (j *Journal) knownHighest(pid string) (int64, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	h, ok := j.known[pid]
	return h, ok
}

func (j *Journal) remember(pid string, h int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.known[pid] = max(j.known[pid], h)
}

func (j *Journal) forget(pid string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.known, pid)
}

var _ journal.Journal = (*Journal)(nil)

// Brokers returns the brokers the journal was opened with.
func (j *Journal) Brokers() []string { return j.brokers }

// ClientOptions returns the franz-go options the journal was opened with
// (WithClientOptions: TLS, SASL, timeouts), which every other client of its
// cluster needs too (a replicator's, a group member's, an admin's).
func (j *Journal) ClientOptions() []kgo.Opt { return slices.Clone(j.cfg.clientOpts) }

// Eventual returns the journal's eventual store.
func (j *Journal) Eventual() eventual.Tables { return j.tables }
