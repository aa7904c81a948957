package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// fakeClock is a clock the test sets.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// sharedKeyspace returns a function that opens stores (as separate
// processes would) on one new keyspace.
func sharedKeyspace(t *testing.T) func(opts ...cassandra.Option) *cassandra.Store {
	t.Helper()
	u, _ := cassandratest.URL(t)
	return func(opts ...cassandra.Option) *cassandra.Store {
		t.Helper()
		s, err := cassandra.Open(t.Context(), u, append([]cassandra.Option{cassandra.WithMigrate(true)}, opts...)...)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// quick are the options of a store whose tag queries see rows at once.
func quick(opts ...cassandra.Option) []cassandra.Option {
	return append([]cassandra.Option{cassandra.WithEventualConsistencyDelay(0),
		cassandra.WithFirstTimeBucket(time.Now().Add(-2 * time.Hour))}, opts...)
}

func mustWriteAll(t testing.TB, j journal.Journal, ws ...journal.AtomicWrite) {
	t.Helper()
	res, err := j.Write(t.Context(), ws)
	if err == nil {
		err = errors.Join(res...)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// tagged returns pid's events from..to, each with tags.
func tagged(pid string, from, to int64, tags ...string) journal.AtomicWrite {
	w := events(pid, from, to)
	for i := range w.Events {
		w.Events[i].Tags = tags
	}
	return w
}

// byTag returns "pid#seq" of every event the current query by tag returns
// for the ids given (all ids when none), and fails on a query error.
func byTag(t *testing.T, rj *cassandra.ReadJournal, tag string, after query.Offset, pids ...string) []string {
	t.Helper()
	var out []string
	for env, err := range rj.CurrentEventsByTag(t.Context(), tag, after) {
		if err != nil {
			t.Fatalf("events by tag %s: %v", tag, err)
		}
		if len(pids) == 0 || slices.Contains(pids, env.PersistenceID) {
			out = append(out, fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr))
		}
	}
	return out
}

func seqList(pid string, from, to int64) []string {
	var out []string
	for s := from; s <= to; s++ {
		out = append(out, fmt.Sprintf("%s#%d", pid, s))
	}
	return out
}

// tagRowKey is the primary key of a tag_views row.
type tagRowKey struct {
	bucket int64
	uuid   gocql.UUID
	tagSeq int64
	seq    int64
}

// tagRowsOf reads pid's rows of tag in the given buckets.
func tagRowsOf(t *testing.T, s *cassandra.Store, tag, pid string, buckets ...int64) []tagRowKey {
	t.Helper()
	it := s.Session().Query(`SELECT timebucket, timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr FROM `+s.Keyspace()+`.tag_views WHERE tag_name = ? AND timebucket IN ?`, tag, buckets).Iter()
	var (
		out []tagRowKey
		k   tagRowKey
		id  string
	)
	for it.Scan(&k.bucket, &k.uuid, &id, &k.tagSeq, &k.seq) {
		if id == pid {
			out = append(out, k)
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// loseTagWrites makes the store look as if the process had crashed after
// writing pid's events to messages and before writing their rows of tag
// after seq keep: the rows are removed and the progress set back.
func loseTagWrites(t *testing.T, s *cassandra.Store, tag, pid string, keep int64) {
	t.Helper()
	now := s.BucketSize().Key(time.Now())
	var kept tagRowKey
	for _, r := range tagRowsOf(t, s, tag, pid, now, now-s.BucketSize().Duration().Milliseconds()) {
		if r.seq <= keep {
			if r.tagSeq > kept.tagSeq {
				kept = r
			}
			continue
		}
		if err := s.Session().Query(`DELETE FROM `+s.Keyspace()+`.tag_views WHERE tag_name = ? AND timebucket = ? AND timestamp = ? AND persistence_id = ? AND tag_pid_sequence_nr = ?`,
			tag, r.bucket, r.uuid, pid, r.tagSeq).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	q := s.Session().Query(`INSERT INTO `+s.Keyspace()+`.tag_write_progress (persistence_id, tag, sequence_nr, tag_pid_sequence_nr, offset) VALUES (?, ?, ?, ?, ?)`,
		pid, tag, kept.seq, kept.tagSeq, kept.uuid)
	if kept.tagSeq == 0 {
		q = s.Session().Query(`DELETE FROM `+s.Keyspace()+`.tag_write_progress WHERE persistence_id = ? AND tag = ?`, pid, tag)
	}
	if err := q.Exec(); err != nil {
		t.Fatal(err)
	}
}

// TestTagWritesLostInACrashAreRepaired: tag rows lost between the messages
// write and the tag views write are written again by the next recovery
// (HighestSequenceNr) of the id, or by its next write in a new process,
// numbered without gaps; rows written twice are delivered once.
func TestTagWritesLostInACrashAreRepaired(t *testing.T) {
	open := sharedKeyspace(t)
	crashed := open(quick()...)
	const a, b = "repair-a", "repair-b"
	for _, pid := range []string{"Rep|recovered", "Rep|written", "Rep|twice"} {
		mustWriteAll(t, crashed.Journal(), tagged(pid, 1, 3, a, b), tagged(pid, 4, 5, a))
	}
	loseTagWrites(t, crashed, a, "Rep|recovered", 3)
	loseTagWrites(t, crashed, b, "Rep|recovered", 2)
	loseTagWrites(t, crashed, a, "Rep|written", 1)
	// Rows stored, progress lost: the repair writes them again.
	if err := crashed.Session().Query(`DELETE FROM `+crashed.Keyspace()+`.tag_write_progress WHERE persistence_id = ?`, "Rep|twice").Exec(); err != nil {
		t.Fatal(err)
	}
	if got := byTag(t, crashed.ReadJournal(), a, query.NoOffset(), "Rep|recovered"); len(got) != 3 {
		t.Fatalf("after the simulated crash, tag %s has %v, want the 3 rows kept", a, got)
	}

	s := open(quick()...) // the next process
	for _, pid := range []string{"Rep|recovered", "Rep|twice"} {
		if h, err := s.Journal().HighestSequenceNr(t.Context(), pid, 0); err != nil || h != 5 {
			t.Fatalf("recovery of %s: highest %d, %v; want 5", pid, h, err)
		}
	}
	mustWriteAll(t, s.Journal(), tagged("Rep|written", 6, 6, a))

	rj := s.ReadJournal()
	tests := []struct {
		tag, pid string
		want     []string
	}{
		{a, "Rep|recovered", seqList("Rep|recovered", 1, 5)},
		{b, "Rep|recovered", seqList("Rep|recovered", 1, 3)},
		{a, "Rep|written", seqList("Rep|written", 1, 6)},
		{b, "Rep|written", seqList("Rep|written", 1, 3)},
		{a, "Rep|twice", seqList("Rep|twice", 1, 5)},
	}
	now := s.BucketSize().Key(time.Now())
	for _, tt := range tests {
		if got := byTag(t, rj, tt.tag, query.NoOffset(), tt.pid); !slices.Equal(got, tt.want) {
			t.Errorf("tag %s, %s: %v, want %v", tt.tag, tt.pid, got, tt.want)
		}
		// Tag sequence numbers follow the events without gaps.
		seen := map[int64]int64{}
		for _, r := range tagRowsOf(t, s, tt.tag, tt.pid, now, now-s.BucketSize().Duration().Milliseconds()) {
			if prev, ok := seen[r.tagSeq]; ok && prev != r.seq {
				t.Errorf("tag %s, %s: tag sequence number %d on events %d and %d", tt.tag, tt.pid, r.tagSeq, prev, r.seq)
			}
			seen[r.tagSeq] = r.seq
		}
		for n := int64(1); n <= int64(len(tt.want)); n++ {
			if _, ok := seen[n]; !ok {
				t.Errorf("tag %s, %s: no row numbered %d", tt.tag, tt.pid, n)
			}
		}
	}
	// A second recovery scans from the mark the first left: nothing new.
	before := len(tagRowsOf(t, s, a, "Rep|recovered", now, now-s.BucketSize().Duration().Milliseconds()))
	if _, err := s.Journal().HighestSequenceNr(t.Context(), "Rep|recovered", 0); err != nil {
		t.Fatal(err)
	}
	if after := len(tagRowsOf(t, s, a, "Rep|recovered", now, now-s.BucketSize().Duration().Milliseconds())); after != before {
		t.Errorf("a second recovery wrote %d more rows, want none", after-before)
	}
}

// searchWatch is a query observer that reports when a tag query searches
// for missing rows.
type searchWatch struct {
	once     sync.Once
	searched chan struct{}
}

func (w *searchWatch) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if strings.Contains(q.Statement, "timestamp <= ?") && strings.Contains(q.Statement, "tag_views") {
		w.once.Do(func() { close(w.searched) })
	}
}

// TestTagGaps: a row whose tag sequence number comes after a missing one
// is held back while the query searches; a row delivered late is then
// delivered in order, and one that never comes fails the query after the
// gap timeout with an error naming the id, tag and numbers.
func TestTagGaps(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	tests := []struct {
		name    string
		deliver bool
	}{
		{"delayed", true},
		{"missing", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{t: t0}
			watch := &searchWatch{searched: make(chan struct{})}
			s := cassandratest.Open(t, cassandra.WithEventualConsistencyDelay(0), cassandra.WithFirstTimeBucket(t0.Add(-2*time.Hour)),
				cassandra.WithClock(clock.Now), cassandra.WithGapTimeout(30*time.Second), cassandra.WithPollInterval(20*time.Millisecond),
				cassandra.WithQueryObserver(watch))
			const tag, pid = "gap", "Gap|1"
			insert := func(tagSeq int64, at time.Time) {
				t.Helper()
				if err := s.Session().Query(`INSERT INTO `+s.Keyspace()+`.tag_views (tag_name, timebucket, timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr, writer_uuid, ser_id, ser_manifest, event_manifest, event) VALUES (?, ?, ?, ?, ?, ?, '', 4, '', '', ?)`,
					tag, s.BucketSize().Key(at), gocql.UUIDFromTime(at), pid, tagSeq, tagSeq*10, []byte("x")).Exec(); err != nil {
					t.Fatal(err)
				}
			}
			insert(1, t0.Add(-3*time.Second))
			insert(3, t0.Add(-1*time.Second))
			type result struct {
				got []int64
				err error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				for env, err := range s.ReadJournal().CurrentEventsByTag(t.Context(), tag, query.NoOffset()) {
					if err != nil {
						r.err = err
						break
					}
					r.got = append(r.got, env.SequenceNr)
				}
				done <- r
			}()
			select {
			case <-watch.searched:
			case r := <-done:
				t.Fatalf("the query ended (%v, %v) without searching for the missing row", r.got, r.err)
			}
			if tt.deliver {
				insert(2, t0.Add(-2*time.Second))
			} else {
				clock.Set(t0.Add(31 * time.Second))
			}
			r := <-done
			if tt.deliver {
				if r.err != nil || !slices.Equal(r.got, []int64{10, 20, 30}) {
					t.Errorf("with the row delivered late: %v, %v; want [10 20 30]", r.got, r.err)
				}
				return
			}
			var missing *cassandra.MissingEventsError
			if !errors.As(r.err, &missing) || !errors.Is(r.err, cassandra.ErrMissingEvents) {
				t.Fatalf("with the row missing: %v, %v; want a *MissingEventsError", r.got, r.err)
			}
			if missing.PersistenceID != pid || missing.Tag != tag || missing.From != 2 || missing.To != 2 || missing.Found != 3 {
				t.Errorf("error %+v, want id %s, tag %s, missing 2 before 3", missing, pid, tag)
			}
			if !slices.Equal(r.got, []int64{10}) {
				t.Errorf("delivered %v before failing, want [10]", r.got)
			}
			for _, want := range []string{pid, `"gap"`, "2 to 2"} {
				if !strings.Contains(r.err.Error(), want) {
					t.Errorf("error %q does not name %s", r.err, want)
				}
			}
		})
	}
}

// TestTagQueryFromCurrentBucketScansForLowest: resumed from an offset in
// the current bucket, a query takes each id's lowest tag sequence number
// after the offset as its start, even when that row's timeuuid is later
// than the next one's (as a writer reusing events' own times can leave).
func TestTagQueryFromCurrentBucketScansForLowest(t *testing.T) {
	t0 := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	s := cassandratest.Open(t, cassandra.WithEventualConsistencyDelay(0), cassandra.WithBucketSize(cassandra.Day),
		cassandra.WithClock(func() time.Time { return t0 }))
	const tag, pid = "lowest", "Low|1"
	insert := func(tagSeq int64, at time.Time) {
		t.Helper()
		if err := s.Session().Query(`INSERT INTO `+s.Keyspace()+`.tag_views (tag_name, timebucket, timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr, writer_uuid, ser_id, ser_manifest, event_manifest, event) VALUES (?, ?, ?, ?, ?, ?, '', 4, '', '', ?)`,
			tag, s.BucketSize().Key(at), gocql.UUIDFromTime(at), pid, tagSeq, tagSeq, []byte("x")).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	offset := gocql.UUIDFromTime(t0.Add(-10 * time.Second))
	insert(4, t0.Add(-20*time.Second)) // before the offset: delivered earlier
	insert(6, t0.Add(-5*time.Second))
	insert(5, t0.Add(-4*time.Second))
	insert(7, t0.Add(-3*time.Second))
	var got []int64
	for env, err := range s.ReadJournal().CurrentEventsByTag(t.Context(), tag, query.TimeUUIDOffset(offset)) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, env.SequenceNr)
	}
	if !slices.Equal(got, []int64{5, 6, 7}) {
		t.Errorf("from an offset in the current bucket: %v, want [5 6 7]", got)
	}
}

// TestTagBuckets: with a fake clock, events written across midnight, an
// hour and minutes land in the partitions of their buckets (in tag_views
// and in messages' timebucket), and a query from no offset or from an
// offset in an earlier bucket walks them in order, skipping empty ones.
func TestTagBuckets(t *testing.T) {
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		size  cassandra.BucketSize
		times []time.Time
	}{
		{cassandra.Day, []time.Time{day.Add(-2 * time.Second), day.Add(-100 * time.Millisecond), day.Add(100 * time.Millisecond), day.Add(26 * time.Hour)}},
		{cassandra.Hour, []time.Time{day.Add(10*time.Hour - 50*time.Millisecond), day.Add(10*time.Hour + 50*time.Millisecond), day.Add(11*time.Hour + 30*time.Minute), day.Add(24 * time.Hour)}},
		{cassandra.Minute, []time.Time{day.Add(-100 * time.Millisecond), day.Add(59*time.Second + 900*time.Millisecond), day.Add(time.Minute + 100*time.Millisecond), day.Add(3*time.Hour + 17*time.Minute)}},
	}
	for _, tt := range tests {
		t.Run(tt.size.String(), func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{}
			s := cassandratest.Open(t, cassandra.WithEventualConsistencyDelay(0), cassandra.WithBucketSize(tt.size),
				cassandra.WithFirstTimeBucket(day.Add(-48*time.Hour)), cassandra.WithClock(clock.Now))
			const tag = "buckets"
			pids := []string{"Buck|a", "Buck|b"}
			var keys []int64
			for i, at := range tt.times {
				clock.Set(at)
				for _, pid := range pids {
					mustWriteAll(t, s.Journal(), tagged(pid, int64(i+1), int64(i+1), tag))
				}
				if k := tt.size.Key(at); !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
			clock.Set(tt.times[len(tt.times)-1].Add(time.Second))
			for _, pid := range pids {
				rows := tagRowsOf(t, s, tag, pid, keys...)
				if len(rows) != len(tt.times) {
					t.Fatalf("%s has %d rows in buckets %v, want %d", pid, len(rows), keys, len(tt.times))
				}
				for _, r := range rows {
					if want := tt.size.Key(tt.times[r.seq-1]); r.bucket != want {
						t.Errorf("%s event %d (written at %v) is in bucket %d, want %d", pid, r.seq, tt.times[r.seq-1], r.bucket, want)
					}
				}
				var bucket string
				if err := s.Session().Query(`SELECT timebucket FROM `+s.Keyspace()+`.messages WHERE persistence_id = ? AND partition_nr = 0 AND sequence_nr = 3`, pid).Scan(&bucket); err != nil || bucket != fmt.Sprint(tt.size.Key(tt.times[2])) {
					t.Errorf("messages timebucket of %s 3: %q, %v; want %d", pid, bucket, err, tt.size.Key(tt.times[2]))
				}
			}
			var all []query.Envelope
			for env, err := range s.ReadJournal().CurrentEventsByTag(t.Context(), tag, query.NoOffset()) {
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, env)
			}
			if len(all) != 2*len(tt.times) {
				t.Fatalf("from no offset: %d events, want %d", len(all), 2*len(tt.times))
			}
			for i, env := range all {
				if want := int64(i/2 + 1); env.SequenceNr != want || !env.Timestamp.Equal(tt.times[i/2]) {
					t.Errorf("event %d: %s %d at %v, want number %d at %v", i, env.PersistenceID, env.SequenceNr, env.Timestamp, want, tt.times[i/2])
				}
			}
			rest := byTag(t, s.ReadJournal(), tag, all[1].Offset)
			if want := []string{"Buck|a#2", "Buck|b#2", "Buck|a#3", "Buck|b#3", "Buck|a#4", "Buck|b#4"}; !slices.Equal(rest, want) {
				t.Errorf("from the second event's offset: %v, want %v", rest, want)
			}
		})
	}
}

// TestTagConcurrentWriters: 16 writers on 1,000 ids, each id's events
// tagged with two or three of three tags; a live query per tag started
// before them, and a current query after, deliver every event of the tag
// exactly once, each id's in order.
func TestTagConcurrentWriters(t *testing.T) {
	const writers, ids = 16, 1000
	s := cassandratest.Open(t, quick()...)
	tagsOf := map[int64][]string{1: {"cw-a", "cw-b"}, 2: {"cw-b", "cw-c"}, 3: {"cw-a", "cw-b", "cw-c"}}
	want := map[string]int{"cw-a": 2 * ids, "cw-b": 3 * ids, "cw-c": 2 * ids}
	check := func(t *testing.T, tag string, envs []query.Envelope) {
		t.Helper()
		last, seen := map[string]int64{}, map[string]bool{}
		for _, e := range envs {
			key := fmt.Sprintf("%s#%d", e.PersistenceID, e.SequenceNr)
			if seen[key] {
				t.Fatalf("tag %s delivered %s twice", tag, key)
			}
			seen[key] = true
			if e.SequenceNr <= last[e.PersistenceID] {
				t.Fatalf("tag %s delivered %s after %d", tag, key, last[e.PersistenceID])
			}
			last[e.PersistenceID] = e.SequenceNr
			if !slices.Contains(tagsOf[e.SequenceNr], tag) {
				t.Fatalf("tag %s delivered %s, tagged %v", tag, key, tagsOf[e.SequenceNr])
			}
		}
		if len(envs) != want[tag] {
			t.Errorf("tag %s delivered %d events, want %d", tag, len(envs), want[tag])
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	live := map[string]chan []query.Envelope{}
	for tag := range want {
		ch := make(chan []query.Envelope, 1)
		live[tag] = ch
		stream := s.ReadJournal().EventsByTag(ctx, tag, query.NoOffset())
		go func() {
			var envs []query.Envelope
			for env := range stream.All() {
				if envs = append(envs, env); len(envs) == want[tag] {
					break
				}
			}
			ch <- envs
		}()
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for seq := int64(1); seq <= 3; seq++ {
				for i := w; i < ids; i += writers {
					if err := ctx.Err(); err != nil {
						return
					}
					pid := fmt.Sprintf("CW|%04d", i)
					res, err := s.Journal().Write(ctx, []journal.AtomicWrite{tagged(pid, seq, seq, tagsOf[seq]...)})
					if err == nil {
						err = errors.Join(res...)
					}
					if err != nil {
						t.Errorf("write %s %d: %v", pid, seq, err)
						cancel()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for tag, ch := range live {
		t.Run("live "+tag, func(t *testing.T) { check(t, tag, <-ch) })
		t.Run("current "+tag, func(t *testing.T) {
			var envs []query.Envelope
			for env, err := range s.ReadJournal().CurrentEventsByTag(t.Context(), tag, query.NoOffset()) {
				if err != nil {
					t.Fatal(err)
				}
				envs = append(envs, env)
			}
			check(t, tag, envs)
		})
	}
}

// TestTagBucketSizeIsFixed: the first open of a keyspace records its
// bucket size; a later open adopts it, and one asking for another size
// fails without changing anything. Tag queries refuse an empty tag and
// offsets of other stores.
func TestTagBucketSizeIsFixed(t *testing.T) {
	open := sharedKeyspace(t)
	first := open(cassandra.WithBucketSize(cassandra.Minute))
	mustWriteAll(t, first.Journal(), tagged("Fix|1", 1, 1, "fixed"))
	if got := open().BucketSize(); got != cassandra.Minute {
		t.Errorf("reopened without a size: %s, want Minute", got)
	}
	_, err := cassandra.Open(t.Context(), "cassandra://"+cassandratest.Address()+"/"+first.Keyspace()+"?bucket_size=hour")
	if !errors.Is(err, cassandra.ErrInvalidConfig) || !strings.Contains(err.Error(), "Minute") {
		t.Errorf("reopened with Hour buckets: %v, want ErrInvalidConfig naming Minute", err)
	}
	if got := open().BucketSize(); got != cassandra.Minute {
		t.Errorf("after the refused open: %s, want Minute", got)
	}
	rj := first.ReadJournal()
	for _, c := range []struct {
		tag    string
		offset query.Offset
		want   error
	}{
		{"", query.NoOffset(), journal.ErrInvalidArgument},
		{"fixed", query.SequenceOffset(3), query.ErrUnsupportedOffset},
		{"fixed", query.TimestampOffset(time.Now(), nil), query.ErrUnsupportedOffset},
	} {
		var err error
		for _, e := range rj.CurrentEventsByTag(t.Context(), c.tag, c.offset) {
			err = e
		}
		if !errors.Is(err, c.want) {
			t.Errorf("CurrentEventsByTag(%q, %s) = %v, want %v", c.tag, c.offset, err, c.want)
		}
		stream := rj.EventsByTag(t.Context(), c.tag, c.offset)
		for range stream.All() {
		}
		if !errors.Is(stream.Err(), c.want) {
			t.Errorf("EventsByTag(%q, %s) ended with %v, want %v", c.tag, c.offset, stream.Err(), c.want)
		}
	}
}

// TestTagScanningFollowsWrites: a process keeps, per id, how far it knows
// every event's tag rows are stored, so that a recovery rereads only what
// may need a repair: none of an id it wrote last, none in the next process
// after a Close (which moves the ids' tag_scanning marks), and only the
// events after the mark when a process ended without one.
func TestTagScanningFollowsWrites(t *testing.T) {
	open := sharedKeyspace(t)
	ctx := t.Context()
	const tag = "scan-tag"
	ids := []struct {
		pid  string
		tags []string
	}{{"Scan|tagged", []string{tag}}, {"Scan|untagged", nil}}
	a := open(quick()...)
	for _, id := range ids {
		if _, err := a.Journal().HighestSequenceNr(ctx, id.pid, 0); err != nil { // as an entity's recovery does
			t.Fatal(err)
		}
		for from := int64(1); from <= 50; from += 10 {
			mustWriteAll(t, a.Journal(), tagged(id.pid, from, from+9, id.tags...))
		}
	}
	recoverAll := func(s *cassandra.Store) int64 {
		t.Helper()
		before := cassandra.RepairReads(s)
		for _, id := range ids {
			if h, err := s.Journal().HighestSequenceNr(ctx, id.pid, 0); err != nil || h < 50 {
				t.Fatalf("recovery of %s: highest %d, %v", id.pid, h, err)
			}
		}
		return cassandra.RepairReads(s) - before
	}
	if n := recoverAll(a); n != 0 {
		t.Errorf("recoveries in the process that wrote the ids read %d events for their tags, want 0", n)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	b := open(quick()...)
	for _, id := range ids {
		var mark int64
		if err := b.Session().Query(`SELECT sequence_nr FROM `+b.Keyspace()+`.tag_scanning WHERE persistence_id = ?`, id.pid).Scan(&mark); err != nil || mark != 50 {
			t.Errorf("%s: tag_scanning %d (%v) after Close, want 50", id.pid, mark, err)
		}
	}
	if n := recoverAll(b); n != 0 {
		t.Errorf("recoveries after the writer's Close read %d events for their tags, want 0", n)
	}
	// b writes 10 more each and ends without a Close or a flush (a
	// crash): the next process rereads those 10.
	b = open(quick(cassandra.WithScanningFlushInterval(time.Hour))...)
	recoverAll(b)
	for _, id := range ids {
		mustWriteAll(t, b.Journal(), tagged(id.pid, 51, 60, id.tags...))
	}
	c := open(quick()...)
	if n := recoverAll(c); n != 20 {
		t.Errorf("recoveries after a process that wrote 10 events per id and did not close read %d events for their tags, want 20", n)
	}
	if got := byTag(t, c.ReadJournal(), tag, query.NoOffset(), "Scan|tagged"); !slices.Equal(got, seqList("Scan|tagged", 1, 60)) {
		t.Errorf("tag %s: %v, want events 1..60 once each", tag, got)
	}
}

// TestRecoveryReadsEachEventOnce: a recovery in a new process
// (HighestSequenceNr, which repairs the id's tag rows, then Replay) reads
// each of the id's events from messages once: the replay takes the events
// the repair read instead of reading them again, and reads only the others.
// The repair still writes the lost tag rows; a deletion in between drops
// what the repair read.
func TestRecoveryReadsEachEventOnce(t *testing.T) {
	open := sharedKeyspace(t)
	ctx := t.Context()
	const tag, n = "once-tag", 60
	tests := []struct {
		name      string
		mark      int64 // the id's tag_scanning mark; 0: no row
		from, max int64 // the replay's
		deleteTo  int64 // deleted after HighestSequenceNr, before Replay
		wantFirst int64 // the first event replayed
		wantRows  int64
	}{
		{name: "no mark", from: 1, max: n, wantFirst: 1, wantRows: n},
		{name: "mark at 40", mark: 40, from: 1, max: n, wantFirst: 1, wantRows: n},
		{name: "no mark, replay from 31 (after a snapshot)", from: 31, max: n, wantFirst: 31, wantRows: n},
		{name: "mark at 40, replay from 51", mark: 40, from: 51, max: n, wantFirst: 51, wantRows: 20},
		{name: "mark at the highest", mark: n, from: 1, max: n, wantFirst: 1, wantRows: n},
		{name: "no mark, replay of 25", from: 1, max: 25, wantFirst: 1, wantRows: n},
		{name: "deleted to 20 after the repair", from: 1, max: n, deleteTo: 20, wantFirst: 21, wantRows: n + 40},
	}
	writer := open(quick(cassandra.WithScanningFlushInterval(time.Hour))...)
	for i, tt := range tests {
		pid := fmt.Sprintf("Once|%d", i)
		mustWriteAll(t, writer.Journal(), tagged(pid, 1, 30, tag), tagged(pid, 31, n, tag))
		loseTagWrites(t, writer, tag, pid, 50) // a crash lost the rows of 51..60
		q := writer.Session().Query(`DELETE FROM `+writer.Keyspace()+`.tag_scanning WHERE persistence_id = ?`, pid)
		if tt.mark > 0 {
			q = writer.Session().Query(`INSERT INTO `+writer.Keyspace()+`.tag_scanning (persistence_id, sequence_nr) VALUES (?, ?)`, pid, tt.mark)
		}
		if err := q.Exec(); err != nil {
			t.Fatal(err)
		}
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := fmt.Sprintf("Once|%d", i)
			var rows atomic.Int64
			s := open(quick(cassandra.WithQueryObserver(rowCounter{&rows}))...)
			highest, err := s.Journal().HighestSequenceNr(ctx, pid, 0)
			if err != nil || highest != n {
				t.Fatalf("HighestSequenceNr = %d, %v; want %d", highest, err, n)
			}
			if tt.deleteTo > 0 {
				if err := s.Journal().DeleteTo(ctx, pid, tt.deleteTo); err != nil {
					t.Fatal(err)
				}
			}
			var got []int64
			for r, err := range s.Journal().Replay(ctx, pid, tt.from, highest, tt.max) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, r.SequenceNr)
			}
			var want []int64
			for seq := tt.wantFirst; seq <= n && int64(len(want)) < tt.max; seq++ {
				want = append(want, seq)
			}
			if !slices.Equal(got, want) {
				t.Errorf("replayed %v, want %v", got, want)
			}
			if got := rows.Load(); got != tt.wantRows {
				t.Errorf("the recovery read %d rows of messages, want %d", got, tt.wantRows)
			}
			if tt.mark < 50 { // the repair's range held the lost rows
				if got := byTag(t, s.ReadJournal(), tag, query.NoOffset(), pid); !slices.Equal(got, seqList(pid, 1, n)) {
					t.Errorf("tag %s: %v, want events 1..%d once each", tag, got, n)
				}
			}
		})
	}
}
