package cassandra

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
)

// statements are the store's CQL with the keyspace spliced in (a name that
// passed ValidKeyspace).
type statements struct {
	guard, guardNew, insert, insertID, replay, replayStamped, highest, deletedTo     string
	setDeletedTo, deleteRange                                                        string
	loadSnaps, saveSnap, deleteSnap, deleteSnaps                                     string
	insertSetting, insertTag, saveProgress, loadProgress, loadScanning, saveScanning string
	readSetting, anyEvent, anyClaim                                                  string
	tagRows, tagRowsFrom, tagProbe, tagRange, allIDs, allIDsAfter                    string
	claimRead, claimNew, claimTake, claimRenew, claimFar, claimPublish, claimVerify  string
	claimFence, rowExists                                                            string
}

func newStatements(ks string) statements {
	q := func(s string) string { return fmt.Sprintf(s, ks) }
	return statements{
		// The conflict guard: a static column of the partition holding the
		// highest number Annals wrote there, moved by every write in the
		// same conditional batch as its events.
		guard:    q(`UPDATE %s.messages SET annals_highest = ? WHERE persistence_id = ? AND partition_nr = ? IF annals_highest < ?`),
		guardNew: q(`UPDATE %s.messages SET annals_highest = ? WHERE persistence_id = ? AND partition_nr = ? IF annals_highest = null`),
		insert: q(`INSERT INTO %s.messages (persistence_id, partition_nr, sequence_nr, timestamp, timebucket, writer_uuid,
	ser_id, ser_manifest, event_manifest, event, meta_ser_id, meta_ser_manifest, meta, tags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?)`),
		insertID: q(`INSERT INTO %s.all_persistence_ids (persistence_id) VALUES (?)`),
		replay: q(`SELECT sequence_nr, timestamp, writer_uuid, ser_id, ser_manifest, event, meta, tags FROM %s.messages
	WHERE persistence_id = ? AND partition_nr = ? AND sequence_nr >= ? AND sequence_nr <= ?`),
		// The same with each row's write timestamp: a repair's read that
		// settled checks (claims.go).
		replayStamped: q(`SELECT sequence_nr, timestamp, writer_uuid, ser_id, ser_manifest, event, meta, tags, WRITETIME(event) FROM %s.messages
	WHERE persistence_id = ? AND partition_nr = ? AND sequence_nr >= ? AND sequence_nr <= ?`),
		highest:      q(`SELECT sequence_nr, timestamp FROM %s.messages WHERE persistence_id = ? AND partition_nr = ? ORDER BY sequence_nr DESC LIMIT 1`),
		deletedTo:    q(`SELECT deleted_to FROM %s.metadata WHERE persistence_id = ?`),
		setDeletedTo: q(`INSERT INTO %s.metadata (persistence_id, deleted_to) VALUES (?, ?)`),
		deleteRange:  q(`DELETE FROM %s.messages WHERE persistence_id = ? AND partition_nr = ? AND sequence_nr >= 0 AND sequence_nr <= ?`),

		loadSnaps: q(`SELECT sequence_nr, timestamp, ` + snapshotNanos + `, ser_id, ser_manifest, snapshot_data FROM %s.snapshots
	WHERE persistence_id = ? AND sequence_nr >= ? AND sequence_nr <= ?`),
		saveSnap: q(`INSERT INTO %s.snapshots (persistence_id, sequence_nr, timestamp, ` + snapshotNanos + `, ser_id, ser_manifest, snapshot_data)
	VALUES (?, ?, ?, ?, ?, ?, ?)`),
		deleteSnap:  q(`DELETE FROM %s.snapshots WHERE persistence_id = ? AND sequence_nr = ?`),
		deleteSnaps: q(`DELETE FROM %s.snapshots WHERE persistence_id = ? AND sequence_nr >= ? AND sequence_nr <= ?`),

		insertSetting: q(`INSERT INTO %s.annals_settings (name, value) VALUES (?, ?) IF NOT EXISTS`),
		readSetting:   q(`SELECT value FROM %s.annals_settings WHERE name = ?`),
		anyEvent:      q(`SELECT persistence_id FROM %s.messages LIMIT 1`),
		anyClaim:      q(`SELECT persistence_id FROM %s.` + claimsTable + ` LIMIT 1`),
		insertTag: q(`INSERT INTO %s.tag_views (tag_name, timebucket, timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr, writer_uuid,
	ser_id, ser_manifest, event_manifest, event, meta_ser_id, meta_ser_manifest, meta, ` + tagViewsTags + `, ` + tagViewsTime + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?)`),
		saveProgress: q(`INSERT INTO %s.tag_write_progress (persistence_id, tag, sequence_nr, tag_pid_sequence_nr, offset) VALUES (?, ?, ?, ?, ?)`),
		loadProgress: q(`SELECT tag, sequence_nr, tag_pid_sequence_nr FROM %s.tag_write_progress WHERE persistence_id = ?`),
		loadScanning: q(`SELECT sequence_nr FROM %s.tag_scanning WHERE persistence_id = ?`),
		saveScanning: q(`INSERT INTO %s.tag_scanning (persistence_id, sequence_nr) VALUES (?, ?)`),
		// A bucket's rows after an offset (exclusive) or from its start
		// (inclusive), before a bound (exclusive), in the table's order.
		tagRows: q(`SELECT timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr, writer_uuid, ser_id, ser_manifest, event_manifest, event, meta, ` + tagViewsTags + `, ` + tagViewsTime + `
	FROM %s.tag_views WHERE tag_name = ? AND timebucket = ? AND timestamp > ? AND timestamp < ?`),
		tagRowsFrom: q(`SELECT timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr, writer_uuid, ser_id, ser_manifest, event_manifest, event, meta, ` + tagViewsTags + `, ` + tagViewsTime + `
	FROM %s.tag_views WHERE tag_name = ? AND timebucket = ? AND timestamp >= ? AND timestamp < ?`),
		// Which of a list of buckets hold rows.
		tagProbe: q(`SELECT timebucket FROM %s.tag_views WHERE tag_name = ? AND timebucket IN ? PER PARTITION LIMIT 1`),
		// A bucket's rows in a time range (inclusive).
		tagRange: q(`SELECT timestamp, persistence_id, tag_pid_sequence_nr, sequence_nr, writer_uuid, ser_id, ser_manifest, event_manifest, event, meta, ` + tagViewsTags + `, ` + tagViewsTime + `
	FROM %s.tag_views WHERE tag_name = ? AND timebucket = ? AND timestamp >= ? AND timestamp <= ?`),
		// The claims (claims.go): a takeover is conditioned on the record's
		// rev, the owner's changes on its token and rev.
		claimRead:  q(`SELECT owner, rev, fence, until, far, base, done, prior FROM %s.` + claimsTable + ` WHERE persistence_id = ?`),
		claimNew:   q(`INSERT INTO %s.` + claimsTable + ` (persistence_id, owner, rev, fence, until, base) VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS`),
		claimTake:  q(`UPDATE %s.` + claimsTable + ` SET owner = ?, rev = ?, fence = ?, until = ?, base = ? WHERE persistence_id = ? IF rev = ?`),
		claimRenew: q(`UPDATE %s.` + claimsTable + ` SET until = ?, rev = ? WHERE persistence_id = ? IF owner = ? AND rev = ?`),
		claimFar:   q(`UPDATE %s.` + claimsTable + ` SET far = ?, rev = ? WHERE persistence_id = ? IF owner = ? AND rev = ?`),
		// A completed claim: its highest number, its fence, the previous
		// completed claim's fence; the far mark it recorded is cleared.
		claimPublish: q(`UPDATE %s.` + claimsTable + ` SET base = ?, done = ?, prior = ?, far = null, rev = ? WHERE persistence_id = ? IF owner = ? AND rev = ?`),
		claimVerify:  q(`SELECT owner FROM %s.` + claimsTable + ` WHERE persistence_id = ?`),
		claimFence:   q(`DELETE FROM %s.messages WHERE persistence_id = ? AND partition_nr IN ? AND sequence_nr > ?`),
		rowExists:    q(`SELECT sequence_nr FROM %s.messages WHERE persistence_id = ? AND partition_nr = ? AND sequence_nr = ? AND timestamp = ?`),

		allIDs:      q(`SELECT persistence_id FROM %s.all_persistence_ids`),
		allIDsAfter: q(`SELECT persistence_id FROM %s.all_persistence_ids WHERE token(persistence_id) > token(?)`),
	}
}

// metaSerializerID is the serializer id stored with an event's metadata:
// Pekko's ByteArraySerializer (Annals' metadata is opaque bytes).
const metaSerializerID = 4

// eventColumns returns the payload (never null: Pekko reads the column as
// bytes) and the metadata's serializer columns of an event (null without
// metadata).
func eventColumns(e *journal.Repr) (payload []byte, metaID *int32, metaManifest *string) {
	if e.Metadata != nil {
		id, m := int32(metaSerializerID), ""
		metaID, metaManifest = &id, &m
	}
	payload = e.Payload
	if payload == nil {
		payload = []byte{}
	}
	return payload, metaID, metaManifest
}

// Journal is the store's event journal; see the package documentation for
// how events are laid out and how conflicts are found.
type Journal struct{ s *Store }

var _ journal.Journal = (*Journal)(nil)

// Journal returns the store's journal.
func (s *Store) Journal() *Journal { return &Journal{s: s} }

// Close closes the store.
func (j *Journal) Close() error { return j.s.Close() }

// partition returns the messages partition of sequence number seq.
func (s *Store) partition(seq int64) int64 { return (max(seq, 1) - 1) / s.cfg.partitionSize }

// Write implements journal.Journal. Each atomic write is one conditional
// batch in one partition; writes of different ids run concurrently (up to
// the store's concurrency), writes of one id one after another, in order.
//
// A write is only stored where a replay reads it (see "Numbers far apart"
// in the package documentation). A write of an id that keeps no events may
// start at any number above the deleted-to mark; when it is the first by
// Annals into its partition and does not start right after the mark, the
// mark is first moved to the number before it. A write of an id that keeps
// events, whose first number lies beyond the partition after the one
// holding its highest number, is rejected with an error wrapping
// journal.ErrInvalidArgument, and nothing of it is stored.
func (j *Journal) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	if j.s.isClosed() {
		return nil, journal.ErrClosed
	}
	results := make([]error, len(writes))
	byID := map[string][]int{}
	var order []string
	for i, w := range writes {
		if err := j.check(w); err != nil {
			results[i] = err
			continue
		}
		if _, ok := byID[w.PersistenceID]; !ok {
			order = append(order, w.PersistenceID)
		}
		byID[w.PersistenceID] = append(byID[w.PersistenceID], i)
	}
	var (
		mu      sync.Mutex
		unknown error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, j.s.cfg.concurrency)
	)
	for _, pid := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, i := range byID[pid] {
				rejected, err := j.writeOne(ctx, writes[i])
				if err != nil {
					mu.Lock()
					unknown = cmpErr(unknown, err)
					mu.Unlock()
					return
				}
				results[i] = rejected
			}
		})
	}
	wg.Wait()
	j.s.written.Notify()
	if unknown != nil {
		return nil, j.s.errs.Map(ctx, "write", unknown, journal.ErrClosed)
	}
	return journal.Results(results), nil
}

func cmpErr(have, err error) error {
	if have != nil {
		return have
	}
	return err
}

// maxTagBytes is the longest tag Cassandra takes: a tag is a component of
// tag_views' partition key, and a key component has at most 65,535 bytes.
const maxTagBytes = 65535

// check rejects an atomic write the store cannot take: invalid, above the
// payload limit, with a tag longer than maxTagBytes (Cassandra would take
// the events and refuse the tag row, leaving the id unrecoverable), or
// with more events than a partition holds.
func (j *Journal) check(w journal.AtomicWrite) error {
	if err := journal.CheckAtomicWrite(w); err != nil {
		return rejection(err)
	}
	if err := journal.CheckPayloads(w, j.s.cfg.maxPayload); err != nil {
		return rejection(err)
	}
	for _, e := range w.Events {
		for _, tag := range e.Tags {
			if len(tag) > maxTagBytes {
				return journal.Reject("%w: event %d of %q has a tag of %d bytes (%.20q…): a tag is part of tag_views' partition key, which Cassandra limits to %d bytes",
					journal.ErrInvalidArgument, e.SequenceNr, w.PersistenceID, len(tag), tag, maxTagBytes)
			}
		}
	}
	if n := int64(len(w.Events)); n > j.s.cfg.partitionSize {
		return journal.Reject("%d events of %q in one atomic write, more than the partition size %d", n, w.PersistenceID, j.s.cfg.partitionSize)
	}
	return nil
}

// rejection returns err as a rejection of the write.
func rejection(err error) error {
	if errors.Is(err, journal.ErrRejected) {
		return err
	}
	return journal.Reject("%w", err)
}

// writeOne stores one atomic write: the rejection when it was refused, or
// an error when the outcome is unknown.
func (j *Journal) writeOne(ctx context.Context, w journal.AtomicWrite) (rejected, unknown error) {
	s := j.s
	first, last := w.Events[0].SequenceNr, w.Events[len(w.Events)-1].SequenceNr
	pnr := s.partition(first)
	st := s.tags.state(w.PersistenceID)
	defer st.mu.Unlock()
	// all_persistence_ids gets the id at its first write in this process
	// (an upsert), so that an id whose first events were written elsewhere,
	// or copied from a store where they were deleted, is listed too.
	if !st.listed {
		if err := s.session.Query(s.sql.insertID, w.PersistenceID).WithContext(ctx).Consistency(s.cfg.writeCL).Exec(); err != nil {
			return nil, err
		}
		st.listed = true
	}
	if s.cfg.guard == GuardClaims {
		return j.writeClaimed(ctx, w, st)
	}
	uuids := s.eventUUIDs(w, st)
	guards := []string{s.sql.guard, s.sql.guardNew}
	if first == 1 {
		// An id's first write: its partition has no guard, unless another
		// writer's write came first (a conflict). Asking for none at once
		// saves the Paxos round of the guard that would fail.
		guards = guards[1:]
	}
	for _, guard := range guards {
		if guard == s.sql.guardNew && first > 1 {
			// The partition's first write by Annals: it must lie where
			// replays read (see "Numbers far apart" in the package
			// documentation).
			if rejected, err := s.reachable(ctx, w.PersistenceID, first, last, pnr); rejected != nil || err != nil {
				return rejected, err
			}
		}
		b := s.session.Batch(gocql.LoggedBatch).WithContext(ctx)
		b.SetConsistency(s.cfg.writeCL)
		b.SerialConsistency(s.cfg.serialCL)
		if guard == s.sql.guard {
			b.Query(guard, last, w.PersistenceID, pnr, first)
		} else {
			b.Query(guard, last, w.PersistenceID, pnr)
		}
		s.addEventRows(b, w, pnr, uuids)
		prev := map[string]any{}
		applied, iter, err := b.MapExecCAS(prev)
		if iter != nil {
			_ = iter.Close()
		}
		if err != nil {
			return invalidWrite(err, w)
		}
		if applied {
			if err := s.tags.written(ctx, w, uuids, st); err != nil {
				return nil, err
			}
			return nil, nil
		}
		if h, ok := prev["annals_highest"].(*int64); ok && h != nil {
			return &journal.ConflictError{PersistenceID: w.PersistenceID, SequenceNr: first}, nil
		}
		if h, ok := prev["annals_highest"].(int64); ok && guard == s.sql.guard && h >= first {
			return &journal.ConflictError{PersistenceID: w.PersistenceID, SequenceNr: first}, nil
		}
		// The partition has no guard yet (its first Annals write, or rows
		// Pekko wrote): try again with the condition that it has none.
	}
	return &journal.ConflictError{PersistenceID: w.PersistenceID, SequenceNr: first}, nil
}

// addEventRows adds the messages rows of w's events, in partition pnr with
// timeuuids uuids, to b.
func (s *Store) addEventRows(b *gocql.Batch, w journal.AtomicWrite, pnr int64, uuids []gocql.UUID) {
	for i := range w.Events {
		e := &w.Events[i]
		payload, metaID, metaManifest := eventColumns(e)
		b.Query(s.sql.insert, w.PersistenceID, pnr, e.SequenceNr, uuids[i], s.bucketText(uuids[i].Time()),
			e.WriterID, e.SerializerID, e.Manifest, payload, metaID, metaManifest, e.Metadata, e.Tags)
	}
}

// invalidWrite sorts the error of w's batch: a batch the server refused as
// invalid (too large, a bad value) is a rejection with the server's
// message, and nothing of it is stored; any other error leaves the
// outcome unknown.
func invalidWrite(err error, w journal.AtomicWrite) (rejected, unknown error) {
	var re gocql.RequestError
	if errors.As(err, &re) && re.Code() == gocql.ErrCodeInvalid {
		return journal.Reject("%s %d–%d: %s", w.PersistenceID, w.Events[0].SequenceNr, w.Events[len(w.Events)-1].SequenceNr, re.Message()), nil
	}
	return nil, err
}

// reachable checks, before the first write by Annals into partition pnr of
// pid, that a replay of pid will read it, and writes the deleted-to mark
// first-1 when that is what makes it so. A write it may not store gets a
// rejection wrapping ErrInvalidArgument.
//
// The mark is written before the events. A batch the server refuses as
// invalid is refused at the write's first attempt (the same batch with the
// other guard), before this runs; when the events' batch then fails (the
// outcome unknown, or a concurrent writer took the partition), the mark
// stays, hiding nothing, since the id kept no events.
func (s *Store) reachable(ctx context.Context, pid string, first, last, pnr int64) (rejected, err error) {
	r, err := s.scan(ctx, pid, 0)
	if err != nil {
		return nil, err
	}
	switch {
	case first-1 <= max(r.deleted, r.kept):
		// The next number, or one at or below the highest: what the
		// guard checks where it can (see Conflicts).
		return nil, nil
	case r.kept > r.deleted:
		if pnr <= r.pnr+1 {
			return nil, nil // replays read on from the partition of the highest
		}
		return farRejection(pid, first, last, pnr, r.kept, r.pnr, s.cfg.partitionSize), nil
	}
	// No events are kept: the mark at first-1 hides none, and makes
	// every replay (Annals' and Pekko's) start at first.
	return nil, s.session.Query(s.sql.setDeletedTo, pid, first-1).WithContext(ctx).Consistency(s.cfg.writeCL).Exec()
}

// deletedTo reads the id's deleted-to mark, 0 when none.
func (s *Store) deletedTo(ctx context.Context, pid string) (int64, error) {
	return s.deletedToAt(ctx, pid, s.cfg.readCL)
}

// deletedToAt reads the id's deleted-to mark at consistency cl.
func (s *Store) deletedToAt(ctx context.Context, pid string, cl gocql.Consistency) (int64, error) {
	var to int64
	err := s.session.Query(s.sql.deletedTo, pid).WithContext(ctx).Consistency(cl).Scan(&to)
	if errors.Is(err, gocql.ErrNotFound) {
		return 0, nil
	}
	return to, err
}

// Replay implements journal.Journal. It reads partition by partition,
// from one before the partition of the first number wanted or of the one
// after the deleted-to mark (a write that crossed a boundary lives in the
// partition of its first event), and stops at the first empty partition
// after that one.
func (j *Journal) Replay(ctx context.Context, persistenceID string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	return func(yield func(journal.Repr, error) bool) {
		if err := journal.CheckReplay(persistenceID, from, to, max); err != nil {
			yield(journal.Repr{}, err)
			return
		}
		for ev, err := range j.s.replay(ctx, persistenceID, from, to, max) {
			if !yield(ev.repr, err) {
				return
			}
		}
	}
}

// replay reads pid's events from..to (at most max) as events does, taking
// those that the recovery's repair just read from its handoff instead of
// reading them again.
func (s *Store) replay(ctx context.Context, pid string, from, to, max int64) iter.Seq2[storedEvent, error] {
	var h *handoff
	if s.tags != nil && !s.isClosed() {
		h = s.tags.takeHandoff(pid)
	}
	if h == nil || from > h.to || to < h.from {
		return s.events(ctx, pid, from, to, max)
	}
	return func(yield func(storedEvent, error) bool) {
		n := int64(0)
		// Before the handoff: read.
		if from < h.from {
			for ev, err := range s.events(ctx, pid, from, h.from-1, max) {
				if !yield(ev, err) || err != nil {
					return
				}
				n++
			}
		}
		// The handoff's events.
		for _, ev := range h.events {
			if n >= max {
				return
			}
			if ev.repr.SequenceNr < from {
				continue
			}
			if ev.repr.SequenceNr > to {
				return
			}
			if err := ctx.Err(); err != nil {
				yield(storedEvent{}, err)
				return
			}
			if !yield(ev, nil) {
				return
			}
			n++
		}
		// After it: read.
		if to > h.to && n < max {
			for ev, err := range s.events(ctx, pid, h.to+1, to, max-n) {
				if !yield(ev, err) {
					return
				}
			}
		}
	}
}

// storedEvent is an event as messages holds it, with its timeuuid.
type storedEvent struct {
	repr journal.Repr
	uuid gocql.UUID
	// written is the row's write timestamp (µs), read only for settled
	// (eventsAt with stamped).
	written int64
}

// events reads pid's events from..to (at most max of them, after the
// deleted-to mark) with journal.Pager, a page per partition, each streamed
// as the driver pages it; see Replay.
func (s *Store) events(ctx context.Context, persistenceID string, from, to, max int64) iter.Seq2[storedEvent, error] {
	return s.eventsAt(ctx, persistenceID, from, to, max, s.cfg.readCL, false)
}

// eventsAt is events reading at consistency cl, and with stamped each
// event's write timestamp too (storedEvent.written).
func (s *Store) eventsAt(ctx context.Context, persistenceID string, from, to, max int64, cl gocql.Consistency, stamped bool) iter.Seq2[storedEvent, error] {
	stmt := s.sql.replay
	if stamped {
		stmt = s.sql.replayStamped
	}
	return func(yield func(storedEvent, error) bool) {
		if s.isClosed() {
			yield(storedEvent{}, journal.ErrClosed)
			return
		}
		if from > to || max == 0 {
			return
		}
		deleted, err := s.deletedToAt(ctx, persistenceID, cl)
		if err != nil {
			yield(storedEvent{}, s.errs.Map(ctx, "replay", err, journal.ErrClosed))
			return
		}
		from = atLeast(from, deleted+1, 1)
		home := s.partition(from)
		first := atLeast(home-1, 0, 0)
		slice, entityType := annals.Slice(persistenceID), annals.EntityType(persistenceID)
		pages := journal.Pager[storedEvent]{
			// Page p.Index is partition first+p.Index, read from the
			// number after the last one seen; an empty partition after
			// home ends the replay.
			ReadPage: func(ctx context.Context, p journal.Page, yield func(*storedEvent) bool) (bool, error) {
				pnr := first + int64(p.Index)
				iter := s.session.Query(stmt, persistenceID, pnr, p.From, p.To).WithContext(ctx).Consistency(cl).Iter()
				// The driver may scan into the slices it was given: every
				// yielded slice is a copy of its own.
				var (
					ev            storedEvent
					payload, meta []byte
					tags          []string
					n             int
				)
				r := &ev.repr
				dest := []any{&r.SequenceNr, &ev.uuid, &r.WriterID, &r.SerializerID, &r.Manifest, &payload, &meta, &tags}
				if stamped {
					dest = append(dest, &ev.written)
				}
				for iter.Scan(dest...) {
					r.PersistenceID, r.Slice, r.EntityType = persistenceID, slice, entityType
					r.Timestamp = ev.uuid.Time().UTC()
					r.Metadata, r.Tags = nil, nil
					if meta != nil {
						r.Metadata = slices.Clone(meta)
					}
					if len(tags) > 0 {
						r.Tags = slices.Clone(tags)
					}
					r.Payload = append([]byte{}, payload...)
					n++
					if !yield(&ev) {
						_ = iter.Close()
						return true, nil
					}
				}
				if err := iter.Close(); err != nil {
					return true, err
				}
				return n == 0 && pnr > home, nil
			},
			SequenceNr: func(ev *storedEvent) int64 { return ev.repr.SequenceNr },
			Errors:     s.errs,
		}
		for ev, err := range pages.Replay(ctx, from, to, max) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// atLeast is the largest of its arguments (Replay's parameter max hides
// the builtin).
func atLeast(a, b, c int64) int64 { return max(a, b, c) }

// HighestSequenceNr implements journal.Journal: the deleted-to mark or the
// highest number in the partitions from the one before the mark's (or the
// hint's) to the first empty one after it. Every recovery calls it, so it
// also repairs the id's events by tag (see the package documentation).
func (j *Journal) HighestSequenceNr(ctx context.Context, persistenceID string, from int64) (int64, error) {
	if err := journal.CheckID("highest sequence number", persistenceID, from); err != nil {
		return 0, err
	}
	if j.s.isClosed() {
		return 0, journal.ErrClosed
	}
	for range 2 {
		r, err := j.s.scan(ctx, persistenceID, from)
		if err != nil {
			return 0, err
		}
		highest, retry, err := j.s.tags.recovered(ctx, persistenceID, r)
		if err != nil || !retry {
			return highest, err
		}
		// The repair took the id to settle an abandoned claim: the rows
		// it read may be gone.
	}
	return 0, fmt.Errorf("highest sequence number of %s: the id's claim kept changing while its rows were settled", persistenceID)
}

// reach is what a scan of an id's partitions found.
type reach struct {
	deleted int64      // the deleted-to mark, 0 when none
	kept    int64      // the highest number above the mark, 0 when none
	pnr     int64      // the partition holding kept
	uuid    gocql.UUID // kept's row's timeuuid
}

// scan reads pid's deleted-to mark and the highest number of the
// partitions a replay reads: from the one before the mark's (or the
// hint's) to the first empty one after it.
func (s *Store) scan(ctx context.Context, persistenceID string, from int64) (reach, error) {
	return s.scanAt(ctx, persistenceID, from, s.cfg.readCL)
}

// scanAt is scan reading at consistency cl.
func (s *Store) scanAt(ctx context.Context, persistenceID string, from int64, cl gocql.Consistency) (reach, error) {
	deleted, err := s.deletedToAt(ctx, persistenceID, cl)
	if err != nil {
		return reach{}, s.errs.Map(ctx, "highest sequence number", err, journal.ErrClosed)
	}
	r := reach{deleted: deleted}
	home := s.partition(max(from, deleted+1))
	for pnr := max(home-1, 0); ; pnr++ {
		var (
			seq  int64
			uuid gocql.UUID
		)
		err := s.session.Query(s.sql.highest, persistenceID, pnr).WithContext(ctx).Consistency(cl).Scan(&seq, &uuid)
		if errors.Is(err, gocql.ErrNotFound) {
			if pnr > home {
				return r, nil
			}
			continue
		}
		if err != nil {
			return reach{}, s.errs.Map(ctx, "highest sequence number", err, journal.ErrClosed)
		}
		if seq > deleted && seq > r.kept {
			r.kept, r.pnr, r.uuid = seq, pnr, uuid
		}
	}
}

// deletionReach reads what DeleteTo deletes from and up to (the id's
// deleted-to mark, and its highest number, the most the mark may move
// to), and with GuardClaims the bound of the id's claim (every timestamp a
// claim of the id wrote is below it; 0 otherwise).
//
// With GuardClaims the deletion claims the id as a write does (or keeps
// this process's claim, once a read shows it is still the id's): rows a
// stale owner stores after a claim read the id's highest number are
// hidden by that claim's tombstone, and its owner writes those numbers
// next, so the mark must lie within what a completed claim read. A claim
// of another process being taken meanwhile fails to publish, and its
// write is refused; the mark lies within this claim's highest number. st
// is locked for the whole deletion.
func (s *Store) deletionReach(ctx context.Context, pid string, st *idTags) (r reach, until int64, err error) {
	if s.cfg.guard != GuardClaims {
		r, err = s.scan(ctx, pid, 0)
		return r, 0, err
	}
	if c := st.claim; c != nil {
		owner, err := s.claimOwner(ctx, pid)
		if err != nil {
			return reach{}, 0, s.errs.Map(ctx, "delete", err, journal.ErrClosed)
		}
		if owner != c.token {
			st.claim = nil
		}
	}
	for attempt := 1; st.claim == nil; attempt++ {
		c, err := s.claimID(ctx, pid, false)
		if err != nil {
			return reach{}, 0, s.errs.Map(ctx, "delete: claim the id", err, journal.ErrClosed)
		}
		if c == nil && attempt == maxClaimAttempts {
			return reach{}, 0, fmt.Errorf("delete %s: other writers kept taking the id while the deletion claimed it", pid)
		}
		st.claim = c
	}
	c := st.claim
	return reach{deleted: c.deleted, kept: c.kept, pnr: c.keptPnr}, c.until, nil
}

// DeleteTo implements journal.Journal: it records the deleted-to mark
// (never beyond the highest number, never lower than before), then removes
// the events partition by partition with range deletions. Replay and
// HighestSequenceNr honour the mark, so an interrupted deletion already
// hides every event it covers; running it again finishes it.
func (j *Journal) DeleteTo(ctx context.Context, persistenceID string, to int64) error {
	if err := journal.CheckID("delete", persistenceID, to); err != nil {
		return err
	}
	if j.s.isClosed() {
		return journal.ErrClosed
	}
	s := j.s
	var st *idTags
	if s.cfg.guard == GuardClaims {
		st = s.tags.state(persistenceID)
		defer st.mu.Unlock()
	}
	r, until, err := s.deletionReach(ctx, persistenceID, st)
	if err != nil {
		return err
	}
	deleted := r.deleted
	to = min(to, max(r.deleted, r.kept))
	if to <= deleted {
		return nil
	}
	if s.tags != nil {
		s.tags.dropHandoff(persistenceID)
	}
	cl := s.cfg.writeCL
	if st != nil {
		cl = s.cfg.guardCL() // a claim's read of the mark meets it
	}
	if err := s.session.Query(s.sql.setDeletedTo, persistenceID, to).WithContext(ctx).Consistency(cl).Exec(); err != nil {
		if st != nil {
			st.claim = nil // the mark may be written: the claim's view is in doubt
		}
		return s.errs.Map(ctx, "delete", err, journal.ErrClosed)
	}
	if st != nil {
		st.claim.deleted = max(st.claim.deleted, to)
	}
	// Events ≤ to live in partitions up to to's, or the next one (akka puts
	// a write that crosses a boundary in its last event's partition). The
	// range deletions are stamped ahead of the clock: a claim's writes may
	// carry timestamps ahead of it (see Conflicts), and no event at or below
	// the mark is ever written again. Every takeover of a live owner moves
	// them a lease further, so they are stamped at least at the bound of
	// the id's claim, above every timestamp a claim of it wrote.
	ts := max(s.micros()+deleteAhead*s.cfg.claimLease.Microseconds(), until)
	for pnr := max(s.partition(deleted+1)-1, 0); pnr <= s.partition(to)+1; pnr++ {
		if err := s.session.Query(s.sql.deleteRange, persistenceID, pnr, to).WithTimestamp(ts).WithContext(ctx).Consistency(s.cfg.writeCL).Exec(); err != nil {
			return s.errs.Map(ctx, "delete", err, journal.ErrClosed)
		}
	}
	return nil
}
