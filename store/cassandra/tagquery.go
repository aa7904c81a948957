package cassandra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// ErrMissingEvents is what a *MissingEventsError wraps.
var ErrMissingEvents = errors.New("cassandra: events by tag: missing events")

// MissingEventsError reports a gap in the tag sequence numbers of a
// persistence id that events by tag did not see filled within the gap
// timeout: the rows numbered From to To are missing before the row
// numbered Found. A row lost without a repair (its id never recovered
// since), or written so late that a query had passed its time, causes it.
type MissingEventsError struct {
	Tag, PersistenceID string
	From, To           int64
	Found              int64
	Waited             time.Duration
}

func (e *MissingEventsError) Error() string {
	return fmt.Sprintf("cassandra: events by tag %q: persistence id %q is missing tag sequence numbers %d to %d before %d (searched for %v)",
		e.Tag, e.PersistenceID, e.From, e.To, e.Found, e.Waited)
}

// Unwrap returns ErrMissingEvents.
func (e *MissingEventsError) Unwrap() error { return ErrMissingEvents }

// viewRow is a tag_views row as the query reads it.
type viewRow struct {
	uuid                     gocql.UUID
	pid                      string
	tagSeq, seq              int64
	writer                   string
	serID                    int32
	serManifest, evtManifest string
	payload, meta            []byte
	tags                     []string
	event                    gocql.UUID // the event's timeuuid; zero in Pekko's rows
}

// idCursor is what a tag query delivered of one persistence id.
type idCursor struct {
	tagSeq     int64
	uuid       gocql.UUID
	slice      int
	entityType string
}

// tagCursor walks a tag's buckets, holding back rows whose tag sequence
// number is not the next of their id until the missing ones are found.
type tagCursor struct {
	s         *Store
	tag       string
	fromStart bool       // from no offset: every id starts at tag sequence number 1
	offset    gocql.UUID // the greatest timeuuid delivered, or the start offset
	bucket    int64
	ids       map[string]idCursor
	scanned   bool
	end       gocql.UUID // the bound of the current run (exclusive)
	// stored: the cursor counts what is stored (StoredEventsByTag): no
	// horizon of writes in flight, no search for missing rows; each id's
	// rows numbered above the highest delivered are delivered.
	stored bool
}

func (s *Store) newTagCursor(tag string, after query.Offset) (*tagCursor, error) {
	if tag == "" {
		return nil, fmt.Errorf("%w: events by tag: empty tag", journal.ErrInvalidArgument)
	}
	c := &tagCursor{s: s, tag: tag, ids: map[string]idCursor{}}
	switch after.Kind {
	case query.KindNone:
		c.fromStart, c.bucket = true, s.bucket.Key(s.cfg.firstBucket)
	case query.KindTimeUUID:
		c.offset = gocql.UUID(after.TimeUUID)
		c.bucket = s.bucket.Key(c.offset.Time())
	default:
		return nil, fmt.Errorf("%w: events by tag on Cassandra resumes from a time-based UUID offset, not %s", query.ErrUnsupportedOffset, after)
	}
	return c, nil
}

// span is the bucket length in milliseconds.
func (c *tagCursor) span() int64 { return c.s.bucket.Duration().Milliseconds() }

// run delivers the rows written before end, bucket after bucket. It
// reports whether yield stopped it.
func (c *tagCursor) run(ctx context.Context, end time.Time, yield func(query.Envelope) bool) (bool, error) {
	s := c.s
	if h := s.tags.horizon(c.tag); !c.stored && !h.IsZero() && h.Before(end) {
		end = h
	}
	endUUID, endBucket := gocql.MinTimeUUID(end), s.bucket.Key(end)
	c.end = endUUID
	if !c.scanned && !c.stored {
		c.scanned = true
		if c.offset != (gocql.UUID{}) && c.bucket == s.bucket.Key(s.cfg.now()) {
			if err := c.scanLowest(ctx, endUUID); err != nil {
				return false, err
			}
		}
	}
	for {
		var q *gocql.Query
		if c.offset == (gocql.UUID{}) {
			q = s.session.Query(s.sql.tagRowsFrom, c.tag, c.bucket, gocql.MinTimeUUID(time.UnixMilli(c.bucket)), endUUID)
		} else {
			q = s.session.Query(s.sql.tagRows, c.tag, c.bucket, c.offset, endUUID)
		}
		iter := q.WithContext(ctx).Consistency(s.cfg.readCL).Iter()
		for {
			r, ok := scanRow(iter)
			if !ok {
				break
			}
			stopped, err := c.handle(ctx, r, yield)
			if stopped || err != nil {
				_ = iter.Close()
				return stopped, err
			}
		}
		if err := iter.Close(); err != nil {
			return false, s.errs.Map(ctx, "events by tag", err, journal.ErrClosed)
		}
		if c.bucket >= endBucket {
			return false, nil
		}
		next, err := c.nextBucket(ctx, c.bucket+c.span(), endBucket)
		if err != nil {
			return false, err
		}
		c.bucket = next
	}
}

// scanRow reads the iterator's next row into a viewRow of its own.
func scanRow(iter *gocql.Iter) (viewRow, bool) {
	var r viewRow
	var payload, meta []byte
	if !iter.Scan(&r.uuid, &r.pid, &r.tagSeq, &r.seq, &r.writer, &r.serID, &r.serManifest, &r.evtManifest, &payload, &meta, &r.tags, &r.event) {
		return r, false
	}
	r.payload = append([]byte{}, payload...)
	if len(meta) > 0 {
		r.meta = slices.Clone(meta)
	}
	r.tags = slices.Clone(r.tags)
	return r, true
}

// handle delivers r when it is the next of its id, skips it when it was
// delivered, and searches for the rows in between otherwise.
func (c *tagCursor) handle(ctx context.Context, r viewRow, yield func(query.Envelope) bool) (bool, error) {
	cur, known := c.ids[r.pid]
	if !known && !c.fromStart {
		return !c.deliver(r, yield), nil // resumed from an offset: its first row seen is its start
	}
	switch {
	case r.tagSeq <= cur.tagSeq:
		return false, nil
	case r.tagSeq == cur.tagSeq+1 || c.stored:
		return !c.deliver(r, yield), nil
	}
	missing, err := c.search(ctx, r, cur)
	if err != nil {
		return false, err
	}
	for _, m := range missing {
		if !c.deliver(m, yield) {
			return true, nil
		}
	}
	return !c.deliver(r, yield), nil
}

func (c *tagCursor) deliver(r viewRow, yield func(query.Envelope) bool) bool {
	cur, ok := c.ids[r.pid]
	if !ok || cur.entityType == "" {
		cur.slice, cur.entityType = annals.Slice(r.pid), annals.EntityType(r.pid)
	}
	cur.tagSeq, cur.uuid = r.tagSeq, r.uuid
	c.ids[r.pid] = cur
	if compareTimeUUID(r.uuid, c.offset) > 0 {
		c.offset = r.uuid
	}
	tags := r.tags
	if len(tags) == 0 {
		tags = []string{c.tag} // a row Pekko wrote holds only its own tag
	}
	ts := r.uuid.Time()
	if r.event != (gocql.UUID{}) {
		ts = r.event.Time()
	}
	return yield(query.Envelope{
		Offset:        query.TimeUUIDOffset(c.offset),
		PersistenceID: r.pid, SequenceNr: r.seq, Timestamp: ts.UTC(),
		EntityType: cur.entityType, Slice: cur.slice, Tags: tags,
		Payload: r.payload, SerializerID: r.serID, Manifest: r.serManifest, WriterID: r.writer, Metadata: r.meta,
	})
}

// search looks for the rows of r's id numbered after cur and before r, in
// r's bucket and the one before it, from cur's time up to the run's bound
// (a row of the id may have a later timeuuid than r when a writer other
// than Annals' gave the event's own), until they are all there (returned
// in order) or the gap timeout has passed.
func (c *tagCursor) search(ctx context.Context, r viewRow, cur idCursor) ([]viewRow, error) {
	s := c.s
	started := s.cfg.now()
	retry := min(s.cfg.pollInterval, 100*time.Millisecond)
	home := s.bucket.Key(r.uuid.Time())
	last := max(home, min(home+c.span(), s.bucket.Key(c.end.Time())))
	first := home - c.span()
	lower := gocql.MinTimeUUID(time.UnixMilli(first))
	if cur.uuid != (gocql.UUID{}) && compareTimeUUID(cur.uuid, lower) > 0 {
		lower, first = cur.uuid, s.bucket.Key(cur.uuid.Time())
	}
	want := r.tagSeq - cur.tagSeq - 1
	for {
		wake := s.signal.Wait()
		found := map[int64]viewRow{}
		for b := first; b <= last; b += c.span() {
			iter := s.session.Query(s.sql.tagRange, c.tag, b, lower, c.end).WithContext(ctx).Consistency(s.cfg.readCL).Iter()
			for {
				m, ok := scanRow(iter)
				if !ok {
					break
				}
				if m.pid == r.pid && m.tagSeq > cur.tagSeq && m.tagSeq < r.tagSeq {
					found[m.tagSeq] = m
				}
			}
			if err := iter.Close(); err != nil {
				return nil, s.errs.Map(ctx, "events by tag: search for missing events", err, journal.ErrClosed)
			}
		}
		if int64(len(found)) == want {
			out := make([]viewRow, 0, want)
			for n := cur.tagSeq + 1; n < r.tagSeq; n++ {
				out = append(out, found[n])
			}
			return out, nil
		}
		if waited := s.cfg.now().Sub(started); waited >= s.cfg.gapTimeout {
			from := cur.tagSeq + 1
			for found[from].pid != "" {
				from++
			}
			return nil, &MissingEventsError{Tag: c.tag, PersistenceID: r.pid, From: from, To: r.tagSeq - 1, Found: r.tagSeq, Waited: waited}
		}
		timer := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// scanLowest, for a query resumed from an offset in the current bucket,
// takes each id's lowest tag sequence number after the offset as its start
// (rows of one id may become visible out of order there).
func (c *tagCursor) scanLowest(ctx context.Context, endUUID gocql.UUID) error {
	s := c.s
	iter := s.session.Query(s.sql.tagRows, c.tag, c.bucket, c.offset, endUUID).WithContext(ctx).Consistency(s.cfg.readCL).Iter()
	for {
		r, ok := scanRow(iter)
		if !ok {
			break
		}
		if cur, ok := c.ids[r.pid]; !ok || r.tagSeq-1 < cur.tagSeq {
			c.ids[r.pid] = idCursor{tagSeq: r.tagSeq - 1}
		}
	}
	if err := iter.Close(); err != nil {
		return s.errs.Map(ctx, "events by tag: scan the current bucket", err, journal.ErrClosed)
	}
	return nil
}

// probeBuckets is how many buckets one probe for rows asks about.
const probeBuckets = 100

// nextBucket returns the first bucket from from up to last that holds rows
// of the tag, or last: it asks which of up to 100 buckets at a time hold a
// row, so that empty hours and minutes cost little.
func (c *tagCursor) nextBucket(ctx context.Context, from, last int64) (int64, error) {
	s := c.s
	for from < last {
		keys := make([]int64, 0, probeBuckets)
		for b := from; b <= last && len(keys) < probeBuckets; b += c.span() {
			keys = append(keys, b)
		}
		iter := s.session.Query(s.sql.tagProbe, c.tag, keys).WithContext(ctx).Consistency(s.cfg.readCL).Iter()
		var (
			found, b int64
			any      bool
		)
		for iter.Scan(&b) {
			if !any || b < found {
				found, any = b, true
			}
		}
		if err := iter.Close(); err != nil {
			return 0, s.errs.Map(ctx, "events by tag: find the next bucket", err, journal.ErrClosed)
		}
		if any {
			return found, nil
		}
		from = keys[len(keys)-1] + c.span()
	}
	return last, nil
}
