package cassandra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
)

// Events by tag are written as seed 004 and akka-persistence-cassandra
// describe: after an atomic write's events are in messages, each of their
// tags gets a row in tag_views, in the (tag, time bucket) partition of the
// event's time, numbered by the persistence id's own sequence of that tag
// (tag_pid_sequence_nr, from 1, without gaps). One writer per tag batches
// the rows of concurrent writes by partition, giving each row a timeuuid
// of the time it is written (Pekko reuses the event's; see tagWriter for
// why Annals does not, and annals_timestamp for the event's); tag_write_progress then
// records, per (persistence id, tag), the last event written. Unlike
// Pekko, an Annals write returns only when its tag rows and progress are
// stored, so that an acknowledged event is never missing from tag_views
// after a crash of this process.
//
// What a crash between the messages and tag_views writes loses, the next
// recovery of the id repairs: HighestSequenceNr (which every recovery
// calls) reads the id's progress and tag_scanning rows, replays the events
// after the scanned mark, writes the tag rows that the progress does not
// cover, and moves tag_scanning to the highest number. The first write of
// an id in this process does the same up to the number before it. A
// repaired row has a timeuuid of the time it is repaired, so that live
// queries which have passed the event's time still find it; a row written
// again (its progress was lost with the crash) is a second row of the same
// tag_pid_sequence_nr, which queries skip (tagCursor.handle).
//
// So that a recovery rereads only what may need it, the process keeps per
// id the number up to which it knows every event's tag rows are stored
// (its repair's end, moved on by each of its own writes that completes):
// a recovery of an id this process wrote last reads no events for tags,
// and every 30 s and at Close the ids' tag_scanning marks are moved up to
// it (as Pekko's scanning flush does), so that a recovery in another
// process rereads only the events after the last flush.
//
// The events a recovery's repair reads are kept for the replay that
// follows it (a handoff): Replay takes them instead of reading them again,
// so a recovery reads each event once (see handoff).

// maxTagBatch is the most rows in one unlogged batch (Pekko's
// max-message-batch-size). Each batch holds one partition, which
// Cassandra's batch size limits do not apply to.
const maxTagBatch = 150

// maxCachedIDs bounds the tag numbering state kept per persistence id;
// beyond it, states are dropped and reloaded (with a repair) on next use.
const maxCachedIDs = 100_000

// tagProgress is how far an id's rows of one tag are written.
type tagProgress struct {
	seq, tagSeq int64
}

// idTags is the tag state of one persistence id in this process. Its mutex
// is held for a whole atomic write of the id.
type idTags struct {
	mu       sync.Mutex
	loaded   bool
	progress map[string]tagProgress
	last     gocql.UUID // the timeuuid of the id's last event written here
	listed   bool       // the id is in all_persistence_ids
	// clean is the number up to which every event of the id has its tag
	// rows stored, as this process knows (a repair up to it, then its own
	// writes that followed on and completed); valid while loaded.
	clean int64
	// scanned is the id's tag_scanning mark as last read or written.
	scanned int64
	// claim is this process's claim of the id (GuardClaims), nil when it
	// has none or its state is in doubt; dropping the state drops it, and
	// the id's next write claims it again.
	claim *claim
	// recoveredTo is the highest number this process's recoveries of the
	// id read (HighestSequenceNr, whoever called it) since a claim last
	// refused a write for it: the highest, not the last, since a later
	// call (a query, a projection, the console) may read fewer events once
	// a tombstone hid rows an entity of this process was built on;
	// recoveredUUID is the timeuuid of the row the first such recovery
	// read there (zero when unknown), against another row written at the
	// number since.
	recoveredTo   int64
	recoveredUUID gocql.UUID
	// dropped: the state left tw.ids; whoever locks it looks the id up
	// again.
	dropped bool
}

// tagRow is one tag_views row. Its timeuuid and bucket are given by the
// tag's writer when it writes the row; event is the event's own timeuuid
// in messages.
type tagRow struct {
	tag    string
	bucket int64
	uuid   gocql.UUID
	event  gocql.UUID
	tagSeq int64
	e      *journal.Repr
}

// scanningFlushInterval is how often the ids' tag_scanning marks are moved
// up to what this process knows is clean (Pekko's
// events-by-tag.scanning-flush-interval), and at Close: a recovery in
// another process then rereads only the events after the mark.
const scanningFlushInterval = 30 * time.Second

// tagWriters holds a writer per tag and the ids' tag states.
type tagWriters struct {
	s       *Store
	mu      sync.Mutex
	writers map[string]*tagWriter
	ids     map[string]*idTags
	dirty   map[string]*idTags // ids whose clean mark moved past their tag_scanning mark

	// handoffs holds, per id, the events its last recovery's repair read,
	// until a replay takes them; handoffBytes is their size.
	handoffs     map[string]*handoff
	handoffBytes int64

	flushing    sync.Mutex // one flush at a time
	stopFlusher chan struct{}
	flusherDone chan struct{}
	repairReads atomic.Int64 // events read by repairs (tests)
}

// handoff is what a recovery's repair read of an id: every event it keeps
// from from to to (the deleted-to mark applied), ascending. The replay
// that follows the repair in the recovery takes them (Replay), instead of
// reading the same rows again. Events up to the id's highest number do
// not change once stored, except by a deletion, which drops the handoff
// of this process; a handoff older than handoffTTL is dropped, so a
// deletion by another process is missed only by a replay within that
// time, as it would be by a replay that began before it.
type handoff struct {
	from, to int64
	events   []storedEvent
	bytes    int64
	expires  time.Time
}

const (
	// handoffTTL is how long a repair's events wait for the replay of
	// the recovery that read them (which follows at once).
	handoffTTL = 10 * time.Second
	// maxHandoffBytes bounds the memory of the events kept for replays,
	// over all ids; a repair whose events do not fit keeps none (its
	// replay reads them).
	maxHandoffBytes = 64 << 20
	// eventOverhead is the memory of an event beside its payload,
	// metadata and tags, for maxHandoffBytes.
	eventOverhead = 160
)

func newTagWriters(s *Store) *tagWriters {
	tw := &tagWriters{s: s, writers: map[string]*tagWriter{}, ids: map[string]*idTags{}, dirty: map[string]*idTags{},
		handoffs: map[string]*handoff{}, stopFlusher: make(chan struct{}), flusherDone: make(chan struct{})}
	go tw.flusher()
	return tw
}

// flusher moves the tag_scanning marks every scanningFlushInterval until
// close.
func (tw *tagWriters) flusher() {
	defer close(tw.flusherDone)
	t := time.NewTicker(tw.s.cfg.scanFlush)
	defer t.Stop()
	for {
		select {
		case <-tw.stopFlusher:
			return
		case <-t.C:
			tw.dropExpiredHandoffs()
			ctx, cancel := context.WithTimeout(context.Background(), tw.s.cfg.timeout)
			_ = tw.flushScanning(ctx) // what fails stays dirty for the next flush
			cancel()
		}
	}
}

// close stops the flusher and moves the marks one last time.
func (tw *tagWriters) close(ctx context.Context) error {
	close(tw.stopFlusher)
	<-tw.flusherDone
	return tw.flushScanning(ctx)
}

// flushScanning writes the tag_scanning mark of every dirty id up to its
// clean mark. An id whose write fails stays dirty.
func (tw *tagWriters) flushScanning(ctx context.Context) error {
	tw.flushing.Lock()
	defer tw.flushing.Unlock()
	tw.mu.Lock()
	dirty := tw.dirty
	tw.dirty = map[string]*idTags{}
	tw.mu.Unlock()
	type due struct {
		pid  string
		st   *idTags
		mark int64
	}
	var todo []due
	for pid, st := range dirty {
		st.mu.Lock()
		if st.loaded && st.clean > st.scanned {
			todo = append(todo, due{pid, st, st.clean})
		}
		st.mu.Unlock()
	}
	s := tw.s
	err := s.parallel(len(todo), func(i int) error {
		d := todo[i]
		if err := s.session.Query(s.sql.saveScanning, d.pid, d.mark).WithContext(ctx).Consistency(s.cfg.writeCL).Exec(); err != nil {
			tw.mu.Lock()
			if _, ok := tw.dirty[d.pid]; !ok { // a newer mark may have been added meanwhile
				tw.dirty[d.pid] = d.st
			}
			tw.mu.Unlock()
			return err
		}
		d.st.mu.Lock()
		d.st.scanned = max(d.st.scanned, d.mark)
		d.st.mu.Unlock()
		return nil
	})
	if err != nil {
		return fmt.Errorf("cassandra: write the ids' tag_scanning marks: %w", err)
	}
	return nil
}

// advance moves pid's clean mark over an atomic write first..last whose
// tag rows are stored, when it follows the mark, and marks pid dirty.
func (tw *tagWriters) advance(pid string, st *idTags, first, last int64) {
	if !st.loaded || st.clean != first-1 {
		return
	}
	st.clean = last
	tw.mu.Lock()
	tw.dirty[pid] = st
	tw.mu.Unlock()
}

// state returns the tag state of pid, locked. At most one state of an id
// exists while any is locked: beyond maxCachedIDs, only states nobody
// holds are dropped, and a state dropped between its lookup and its lock
// is looked up again. So every write and recovery of an id holds the same
// mutex, and the id's rows are never in two flushes at once.
func (tw *tagWriters) state(pid string) *idTags {
	for {
		tw.mu.Lock()
		st := tw.ids[pid]
		if st == nil {
			if len(tw.ids) >= maxCachedIDs {
				tw.dropStates(maxCachedIDs / 2)
			}
			st = &idTags{}
			tw.ids[pid] = st
		}
		tw.mu.Unlock()
		st.mu.Lock()
		if !st.dropped {
			return st
		}
		st.mu.Unlock()
	}
}

// dropStates drops up to n states that nobody holds, in the map's random
// order. tw.mu is held.
func (tw *tagWriters) dropStates(n int) {
	for id, st := range tw.ids {
		if n == 0 {
			return
		}
		if !st.mu.TryLock() {
			continue // held: dropping it would let a second state of the id be used beside it
		}
		st.dropped = true
		st.mu.Unlock()
		delete(tw.ids, id)
		n--
	}
}

// writer returns the tag's writer.
func (tw *tagWriters) writer(tag string) *tagWriter {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	w := tw.writers[tag]
	if w == nil {
		w = &tagWriter{tw: tw, tag: tag}
		tw.writers[tag] = w
	}
	return w
}

// eventUUIDs returns the timeuuid of each event of w: its time (the
// store's clock when it has none) moved forward by 100 ns steps where
// needed so that the id's timeuuids grow with its sequence numbers.
func (s *Store) eventUUIDs(w journal.AtomicWrite, st *idTags) []gocql.UUID {
	now := s.cfg.now()
	out := make([]gocql.UUID, len(w.Events))
	prev := st.last
	for i, e := range w.Events {
		ts := e.Timestamp
		if ts.IsZero() {
			ts = now
		}
		ts = ts.Truncate(100 * time.Nanosecond) // a timeuuid's resolution
		if prev != (gocql.UUID{}) && !ts.After(prev.Time()) {
			ts = prev.Time().Add(100 * time.Nanosecond)
		}
		out[i] = gocql.UUIDFromTime(ts)
		prev = out[i]
	}
	return out
}

// rowsOf numbers the tag rows of events (uuids are their timeuuids in
// messages) after progress, which it advances; events at or below a tag's
// progress have their row already.
func rowsOf(events []journal.Repr, uuids []gocql.UUID, progress map[string]tagProgress) []tagRow {
	var rows []tagRow
	for i := range events {
		e := &events[i]
		for j, tag := range e.Tags {
			if slices.Contains(e.Tags[:j], tag) {
				continue
			}
			p := progress[tag]
			if e.SequenceNr <= p.seq {
				continue
			}
			p.seq, p.tagSeq = e.SequenceNr, p.tagSeq+1
			progress[tag] = p
			rows = append(rows, tagRow{tag: tag, event: uuids[i], tagSeq: p.tagSeq, e: e})
		}
	}
	return rows
}

// written writes the tag rows of an atomic write whose events are stored,
// repairing the id's earlier rows first when its state is not loaded. On
// an error the state is dropped, so that the next use repairs again.
func (tw *tagWriters) written(ctx context.Context, w journal.AtomicWrite, uuids []gocql.UUID, st *idTags) error {
	st.last = uuids[len(uuids)-1]
	first, last := w.Events[0].SequenceNr, w.Events[len(w.Events)-1].SequenceNr
	tagged := false
	for _, e := range w.Events {
		tagged = tagged || len(e.Tags) > 0
	}
	if !tagged {
		tw.advance(w.PersistenceID, st, first, last)
		return nil
	}
	if !st.loaded {
		if _, err := tw.repair(ctx, w.PersistenceID, st, w.Events[0].SequenceNr-1, false); err != nil {
			return err
		}
	}
	progress := maps.Clone(st.progress)
	if progress == nil {
		progress = map[string]tagProgress{}
	}
	rows := rowsOf(w.Events, uuids, progress)
	if err := tw.write(ctx, rows); err != nil {
		st.loaded = false
		return err
	}
	st.progress = progress
	tw.advance(w.PersistenceID, st, first, last)
	return nil
}

// recovered repairs the tag rows of pid, whose scan found r, up to its
// highest number, and loads its state: what HighestSequenceNr does for
// every recovery. It returns the highest number the recovery reads: r's,
// or under claims the last settled row's when the rows above it are
// hidden by a completed claim. retry: the repair took the id's claim to
// settle its rows, which may be gone; the recovery reads again.
//
// An id whose every event up to the highest number this process knows to
// have its tag rows (its state's clean mark) needs no repair: no other
// process wrote it since, as that would have raised its highest number. A
// claim of the id (GuardClaims) whose highest number is below it is
// dropped.
func (tw *tagWriters) recovered(ctx context.Context, pid string, r reach) (highest int64, retry bool, err error) {
	st := tw.state(pid)
	defer st.mu.Unlock()
	highest = max(r.deleted, r.kept)
	var uuid gocql.UUID // of the row at highest, when it is a row
	if r.kept > r.deleted {
		uuid = r.uuid
	}
	if tw.s.cfg.guard == GuardClaims {
		// Under claims a handoff serves only the replay that follows the
		// recovery which read it: one left by an earlier call (a
		// projection's, which replays nothing) may hold rows a claim's
		// tombstone hid since, and this recovery may keep none of its own
		// (no repair, or a highest number below the scanned mark). Under
		// the conditional guard stored events never change, and DeleteTo
		// drops the id's handoff.
		tw.dropHandoff(pid)
	}
	if st.claim != nil && highest > st.claim.highest() {
		// Another writer wrote the id after this process's claim, so it
		// took the claim: the next write claims the id again, rather than
		// write under the old claim and be refused as its stale owner.
		st.claim = nil
	}
	if !st.loaded || st.clean != highest {
		st.loaded = false
		rep, err := tw.repair(ctx, pid, st, highest, true)
		if err != nil {
			return 0, false, err
		}
		switch rep.how {
		case claimTaken:
			return 0, true, nil
		case rowsHidden:
			highest, uuid = max(rep.to, r.deleted), rep.uuid
		}
	}
	// What the writer the recovery is for built on: the write check of
	// writeClaimed.
	switch {
	case highest > st.recoveredTo:
		st.recoveredTo, st.recoveredUUID = highest, uuid
	case highest == st.recoveredTo && st.recoveredUUID == (gocql.UUID{}):
		st.recoveredUUID = uuid
	}
	return highest, false, nil
}

// repaired is what a repair did.
type repaired struct {
	to   int64      // the number its marks reached: upTo, or below it the last settled row
	uuid gocql.UUID // the timeuuid of the row at to, when the repair read it
	how  settlement // under claims, what settled found
}

// repair reads pid's tag progress, writes the tag rows of its events after
// the tag_scanning mark up to upTo that the progress does not cover, and
// loads the state. With keep (a recovery's repair), the events it read are
// kept for the recovery's replay (see handoff). Under claims only rows
// settled (no claim hides them later) get tag rows, the mark and the
// handoff; when that stops short of upTo the state stays unloaded, so that
// the id's next write or recovery repairs again. A write's repair (without
// keep) reads rows below a write of this process that is stored for good
// (written after it): every one of them is settled.
func (tw *tagWriters) repair(ctx context.Context, pid string, st *idTags, upTo int64, keep bool) (repaired, error) {
	s := tw.s
	res := repaired{to: upTo}
	progress := map[string]tagProgress{}
	iter := s.session.Query(s.sql.loadProgress, pid).WithContext(ctx).Consistency(s.cfg.readCL).Iter()
	var (
		tag string
		p   tagProgress
	)
	for iter.Scan(&tag, &p.seq, &p.tagSeq) {
		progress[tag] = p
	}
	if err := iter.Close(); err != nil {
		return res, s.errs.Map(ctx, "read tag progress", err, journal.ErrClosed)
	}
	var scanned int64
	if err := s.session.Query(s.sql.loadScanning, pid).WithContext(ctx).Consistency(s.cfg.readCL).Scan(&scanned); err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return res, s.errs.Map(ctx, "read tag scanning", err, journal.ErrClosed)
	}
	if upTo > scanned {
		var (
			events []storedEvent // tagged, or every one with keep
			stamps []rowStamp
			read   = &handoff{from: scanned + 1}
			// Under claims, rows up to what this process's claim knows
			// are settled (its own read or writes); others are checked.
			claims = s.cfg.guard == GuardClaims && keep && (st.claim == nil || upTo > st.claim.highest())
			before claimRecord
		)
		cl := s.cfg.readCL
		if claims {
			var err error
			if before, err = s.readClaim(ctx, pid); err != nil {
				return res, s.errs.Map(ctx, "read the id's claim", err, journal.ErrClosed)
			}
			cl = s.cfg.guardCL() // settled's rules hold for rows a claim's read meets
		}
		for ev, err := range s.eventsAt(ctx, pid, scanned+1, upTo, upTo, cl, claims) {
			if err != nil {
				return res, err
			}
			tw.repairReads.Add(1)
			if claims {
				stamps = append(stamps, rowStamp{ev.repr.SequenceNr, ev.written, ev.uuid})
			}
			if compareTimeUUID(ev.uuid, st.last) > 0 {
				st.last = ev.uuid
			}
			if keep {
				if read.bytes += eventBytes(&ev.repr); read.bytes > maxHandoffBytes {
					// Too large: the replay reads them.
					keep, read.bytes = false, 0
					events = slices.DeleteFunc(events, func(ev storedEvent) bool { return len(ev.repr.Tags) == 0 })
				}
			}
			if len(ev.repr.Tags) > 0 || keep {
				events = append(events, ev)
			}
		}
		if claims {
			var err error
			if res.to, res.how, err = s.settled(ctx, pid, st, before, scanned, upTo, stamps); err != nil {
				return res, s.errs.Map(ctx, "settle the id's rows", err, journal.ErrClosed)
			}
			if res.how == claimTaken {
				return res, nil
			}
			for _, r := range stamps {
				if r.seq == res.to {
					res.uuid = r.uuid
				}
			}
		}
		var (
			tagged []journal.Repr
			uuids  []gocql.UUID
		)
		for i, ev := range events {
			if ev.repr.SequenceNr > res.to {
				events = events[:i]
				break
			}
			if len(ev.repr.Tags) > 0 {
				tagged, uuids = append(tagged, ev.repr), append(uuids, ev.uuid)
			}
		}
		read.to, read.events = res.to, events
		if err := tw.write(ctx, rowsOf(tagged, uuids, progress)); err != nil {
			return res, err
		}
		if res.to > scanned {
			if err := s.session.Query(s.sql.saveScanning, pid, res.to).WithContext(ctx).Consistency(s.cfg.writeCL).Exec(); err != nil {
				return res, s.errs.Map(ctx, "write tag scanning", err, journal.ErrClosed)
			}
			scanned = res.to
		}
		if keep {
			tw.keepHandoff(pid, read)
		}
		if res.to < upTo {
			st.loaded, st.scanned = false, scanned
			return res, nil
		}
	}
	st.progress, st.loaded, st.clean, st.scanned = progress, true, upTo, scanned
	return res, nil
}

// eventBytes is the memory an event holds, for maxHandoffBytes.
func eventBytes(r *journal.Repr) int64 {
	n := eventOverhead + len(r.Payload) + len(r.Metadata) + len(r.Manifest) + len(r.WriterID)
	for _, t := range r.Tags {
		n += len(t) + 16
	}
	return int64(n)
}

// keepHandoff keeps the events a recovery's repair read of pid for its
// replay, in place of an earlier handoff of pid, when they fit in
// maxHandoffBytes.
func (tw *tagWriters) keepHandoff(pid string, h *handoff) {
	h.expires = time.Now().Add(handoffTTL)
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if old := tw.handoffs[pid]; old != nil {
		tw.handoffBytes -= old.bytes
		delete(tw.handoffs, pid)
	}
	if tw.handoffBytes+h.bytes > maxHandoffBytes {
		return
	}
	tw.handoffs[pid] = h
	tw.handoffBytes += h.bytes
}

// takeHandoff removes and returns pid's handoff, nil when it has none or
// it expired.
func (tw *tagWriters) takeHandoff(pid string) *handoff {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	h := tw.handoffs[pid]
	if h == nil {
		return nil
	}
	delete(tw.handoffs, pid)
	tw.handoffBytes -= h.bytes
	if time.Now().After(h.expires) {
		return nil
	}
	return h
}

// dropHandoff drops pid's handoff: its events are being deleted.
func (tw *tagWriters) dropHandoff(pid string) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if h := tw.handoffs[pid]; h != nil {
		delete(tw.handoffs, pid)
		tw.handoffBytes -= h.bytes
	}
}

// dropExpiredHandoffs drops the handoffs no replay took in time.
func (tw *tagWriters) dropExpiredHandoffs() {
	now := time.Now()
	tw.mu.Lock()
	defer tw.mu.Unlock()
	for id, h := range tw.handoffs {
		if now.After(h.expires) {
			delete(tw.handoffs, id)
			tw.handoffBytes -= h.bytes
		}
	}
}

// write hands rows to their tags' writers and waits until all are stored.
func (tw *tagWriters) write(ctx context.Context, rows []tagRow) error {
	if len(rows) == 0 {
		return nil
	}
	byTag := map[string][]tagRow{}
	var order []string
	for _, r := range rows {
		if _, ok := byTag[r.tag]; !ok {
			order = append(order, r.tag)
		}
		byTag[r.tag] = append(byTag[r.tag], r)
	}
	reqs := make([]*tagRequest, len(order))
	for i, tag := range order {
		reqs[i] = tw.writer(tag).submit(byTag[tag])
	}
	var first error
	for _, r := range reqs {
		select {
		case err := <-r.done:
			first = cmpErr(first, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if first != nil {
		return tw.s.errs.Map(ctx, "write tag views", first, journal.ErrClosed)
	}
	return nil
}

// tagWriter batches the rows of one tag: a submitter that finds it idle
// starts a flush; rows submitted during a flush go together in the next.
//
// The writer gives each row its timeuuid when the flush starts, growing
// from flush to flush and within one, and keeps that start while the flush
// is in flight: queries of this process read only rows older than it, so
// that a row cannot become visible after a query has passed its time (the
// eventual-consistency delay covers writers in other processes).
type tagWriter struct {
	tw       *tagWriters
	tag      string
	mu       sync.Mutex
	queue    []*tagRequest
	busy     bool
	inflight time.Time // the first timeuuid time of the flush in flight
	last     time.Time // the last timeuuid time given
}

// horizon returns the time before which every row this process writes
// for tag is stored, or the zero time when no flush is in flight.
func (tw *tagWriters) horizon(tag string) time.Time {
	tw.mu.Lock()
	w := tw.writers[tag]
	tw.mu.Unlock()
	if w == nil {
		return time.Time{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inflight
}

type tagRequest struct {
	rows []tagRow
	done chan error
}

func (w *tagWriter) submit(rows []tagRow) *tagRequest {
	r := &tagRequest{rows: rows, done: make(chan error, 1)}
	w.mu.Lock()
	w.queue = append(w.queue, r)
	start := !w.busy
	w.busy = true
	w.mu.Unlock()
	if start {
		go w.lead()
	}
	return r
}

// lead flushes the queue until it is empty.
func (w *tagWriter) lead() {
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		if len(batch) == 0 {
			w.busy = false
			w.mu.Unlock()
			return
		}
		s := w.tw.s
		t := s.cfg.now().UTC().Truncate(100 * time.Nanosecond)
		if !t.After(w.last) {
			t = w.last.Add(100 * time.Nanosecond)
		}
		w.inflight = t
		w.mu.Unlock()
		var rows []tagRow
		for _, r := range batch {
			for _, row := range r.rows {
				row.uuid, row.bucket = gocql.UUIDFromTime(t), s.bucket.Key(t)
				rows = append(rows, row)
				t = t.Add(100 * time.Nanosecond)
			}
		}
		w.last = t.Add(-100 * time.Nanosecond)
		err := s.flushTag(rows)
		w.mu.Lock()
		w.inflight = time.Time{}
		w.mu.Unlock()
		for _, r := range batch {
			r.done <- err
		}
	}
}

// flushTag writes rows of one tag: unlogged batches of one partition each,
// then the progress of each id, all concurrently; then it wakes live
// queries.
func (s *Store) flushTag(rows []tagRow) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	byBucket := map[int64][]tagRow{}
	var buckets []int64
	last := map[string]tagRow{}
	var ids []string
	for _, r := range rows {
		if _, ok := byBucket[r.bucket]; !ok {
			buckets = append(buckets, r.bucket)
		}
		byBucket[r.bucket] = append(byBucket[r.bucket], r)
		if _, ok := last[r.e.PersistenceID]; !ok {
			ids = append(ids, r.e.PersistenceID)
		}
		if r.tagSeq > last[r.e.PersistenceID].tagSeq {
			last[r.e.PersistenceID] = r
		}
	}
	var chunks [][]tagRow
	for _, b := range buckets {
		for c := range slices.Chunk(byBucket[b], maxTagBatch) {
			chunks = append(chunks, c)
		}
	}
	err := s.parallel(len(chunks), func(i int) error {
		b := s.session.Batch(gocql.UnloggedBatch).WithContext(ctx)
		b.SetConsistency(s.cfg.writeCL)
		for _, r := range chunks[i] {
			e := r.e
			payload, metaID, metaManifest := eventColumns(e)
			b.Query(s.sql.insertTag, r.tag, r.bucket, r.uuid, e.PersistenceID, r.tagSeq, e.SequenceNr, e.WriterID,
				e.SerializerID, e.Manifest, payload, metaID, metaManifest, e.Metadata, e.Tags, r.event)
		}
		return b.Exec()
	})
	if err != nil {
		return err
	}
	err = s.parallel(len(ids), func(i int) error {
		r := last[ids[i]]
		return s.session.Query(s.sql.saveProgress, r.e.PersistenceID, r.tag, r.e.SequenceNr, r.tagSeq, r.uuid).
			WithContext(ctx).Consistency(s.cfg.writeCL).Exec()
	})
	if err != nil {
		return err
	}
	s.signal.Notify()
	return nil
}

// parallel runs f(0..n-1), at most the store's concurrency at once, and
// returns the first error.
func (s *Store) parallel(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, s.cfg.concurrency)
	)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// bucketText is the messages table's timebucket of t (akka's TimeBucket
// key, as text).
func (s *Store) bucketText(t time.Time) string {
	return strconv.FormatInt(s.bucket.Key(t), 10)
}
