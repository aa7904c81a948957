package cassandra

import (
	"context"
	"errors"
	"fmt"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
)

// ErrSuperseded reports an atomic write sent by a writer whose claim of the
// id another writer took while the write was being stored. Its outcome is
// unknown: the events are kept when the new owner's claim found them, and
// never visible otherwise. The id's next write claims it again.
var ErrSuperseded = errors.New("cassandra: another writer claimed the id while the write was stored")

// DefaultClaimLease is how far ahead of its last write a claim's timestamp
// bound reaches (see "Conflicts" in the package documentation). A writer
// moves it on with a lightweight transaction once half of it is used; a
// writer taking an id over writes with timestamps above the bound of the
// claim it took, so up to this much ahead of its clock.
const DefaultClaimLease = 20 * time.Second

// deleteAhead is how many claim leases ahead of the clock DeleteTo stamps
// its range deletions.
const deleteAhead = 4

// claimsTable is where the claims of ids live, one row per id:
//   - owner: the current claim's token; rev: moved by every change of the
//     row, the condition of a takeover;
//   - fence and until: the current claim's writes have timestamps above
//     fence and below until;
//   - far: a deleted-to mark the owner announced before writing it;
//   - base, done and prior: the latest completed claim (one that read the
//     id's highest number and published it): its highest number, its
//     fence, and the fence of the completed claim before it. base is
//     minus the fence while the record's first claim was never taken: no
//     earlier claimed writer exists, and rows below its fence were
//     written before claims (settled relies on it). A takeover moves the
//     fence, so the mark no longer holds, whatever sets base (an Annals
//     version before the mark leaves it); this one sets it to 0 until a
//     claim completes.
const claimsTable = "annals_claims"

const claimsTableCQL = `CREATE TABLE IF NOT EXISTS {ks}.annals_claims (
  persistence_id text PRIMARY KEY,
  owner uuid,
  rev bigint,
  fence bigint,
  until bigint,
  far bigint,
  base bigint,
  done bigint,
  prior bigint)`

// claim is this process's claim of an id, kept in the id's idTags (under
// its mutex) while valid; nil once in doubt.
type claim struct {
	token gocql.UUID
	rev   int64 // the record's rev this claim last wrote
	fence int64 // the claim's writes have timestamps above it (µs)
	until int64 // and below it
	last  int64 // the timestamp of the claim's last write (its fence at first)
	// What the claim knows of the id: its deleted-to mark, its highest
	// number above the mark (0 when none) and that number's partition.
	deleted, kept, keptPnr int64
	// keptUUID is the timeuuid of the row at kept (zero when unknown).
	keptUUID gocql.UUID
}

// highest is the id's highest number as the claim knows it.
func (c *claim) highest() int64 { return max(c.deleted, c.kept) }

// claimRecord is a row of annals_claims as read.
type claimRecord struct {
	owner                  gocql.UUID
	rev, fence, until, far int64 // far: 0 when none
	base, done, prior      int64 // done: 0 when no claim completed
	exists                 bool
}

// recordFrom reads a claim record from the columns a read or a failed
// lightweight transaction returned.
func recordFrom(m map[string]any) claimRecord {
	r := claimRecord{exists: true}
	r.owner, _ = m["owner"].(gocql.UUID)
	for name, v := range map[string]*int64{"rev": &r.rev, "fence": &r.fence, "until": &r.until, "far": &r.far, "base": &r.base, "done": &r.done, "prior": &r.prior} {
		*v, _ = m[name].(int64)
	}
	return r
}

// guardCL is the consistency of the claim protocol's plain reads and
// writes: a quorum in the scope of the serial consistency, so that a read
// meets every write acknowledged before it and every committed claim.
func (c *config) guardCL() gocql.Consistency {
	if c.serialCL == gocql.Serial {
		return gocql.Quorum
	}
	return gocql.LocalQuorum
}

// micros returns the store clock's time in Unix microseconds, a write
// timestamp's unit.
func (s *Store) micros() int64 { return s.cfg.now().UnixMicro() }

// maxClaimAttempts bounds a claim's lightweight transactions when other
// writers keep changing the id's record.
const maxClaimAttempts = 8

// claimID makes this store the owner of pid and returns its claim:
//
//  1. Take: it reads the id's record and gives it a new owner in one
//     lightweight transaction conditioned on the record's rev (IF NOT
//     EXISTS for an id never claimed), with a fence at or above the
//     earlier owner's until. Every later change of the record by an
//     earlier owner (renewal, a far mark, a publication) then fails.
//  2. It writes again the tombstone of the latest completed claim (see
//     4), which its own owner may not have written, and records the
//     deleted-to mark the earlier owner announced (far), if it is above
//     the id's, as that owner would have before its write.
//  3. It reads the id's highest number H at a quorum: every write an
//     earlier owner acknowledged is in it (the owner read its token after
//     storing the write, so before this claim took the id, and H is read
//     after), and no row it finds is hidden later (the tombstone of step
//     2 is in place, and a claim that did not complete step 4 writes no
//     tombstone).
//  4. Publish: one lightweight transaction conditioned on its own owner
//     and rev records H and its fence as the latest completed claim; then
//     it writes, at the fence's timestamp, a range tombstone over the
//     numbers above H in H's partition and the next. An earlier owner's
//     write still on its way lies there (it starts at most at H+1, or at
//     a far mark step 2 recorded) and has a timestamp below that owner's
//     until, so below the fence: once the tombstone is written no reader,
//     Annals' or Pekko's, sees it. The claim's own writes have timestamps
//     above the fence.
//
// A claim that loses the id before its publication completes writes
// nothing.
//
// A claim that creates the id's record (IF NOT EXISTS applied) skips the
// rest of step 2 and step 4: no claim came before it, so no earlier
// claimed writer has rows to hide, and a later claim finds no completed
// claim to write the tombstone of. fresh (the write starts at number 1)
// tries that first, without reading the record.
func (s *Store) claimID(ctx context.Context, pid string, fresh bool) (*claim, error) {
	token, err := gocql.RandomUUID()
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", pid, err)
	}
	cl := s.cfg.guardCL()
	var rec claimRecord
	if !fresh {
		if rec, err = s.readClaim(ctx, pid); err != nil {
			return nil, err
		}
	}
	c := &claim{token: token}
	for attempt := 1; ; attempt++ {
		c.fence = s.micros()
		if rec.exists {
			c.fence = max(c.fence, rec.until, rec.fence+1)
		}
		c.until, c.rev, c.last = c.fence+s.cfg.claimLease.Microseconds(), rec.rev+1, c.fence
		var q *gocql.Query
		if rec.exists {
			q = s.session.Query(s.sql.claimTake, token, c.rev, c.fence, c.until, max(rec.base, 0), pid, rec.rev)
		} else {
			q = s.session.Query(s.sql.claimNew, pid, token, c.rev, c.fence, c.until, -c.fence)
		}
		prev := map[string]any{}
		applied, err := q.WithContext(ctx).Consistency(cl).SerialConsistency(s.cfg.serialCL).MapScanCAS(prev)
		if err != nil {
			return nil, err
		}
		if applied {
			break
		}
		if attempt == maxClaimAttempts {
			return nil, fmt.Errorf("claim %s: the id's claim changed %d times while this writer tried to take it", pid, attempt)
		}
		if rec.exists {
			// A failed UPDATE returns only the condition's column: read
			// the record again.
			if rec, err = s.readClaim(ctx, pid); err != nil {
				return nil, err
			}
		} else {
			rec = recordFrom(prev) // IF NOT EXISTS returns the whole row
		}
	}
	if rec.done > 0 {
		if err := s.fenceAbove(ctx, pid, rec.base, rec.done); err != nil {
			return nil, err
		}
	}
	if rec.far > 0 {
		deleted, err := s.deletedToAt(ctx, pid, cl)
		if err != nil {
			return nil, err
		}
		if rec.far > deleted {
			if err := s.session.Query(s.sql.setDeletedTo, pid, rec.far).WithContext(ctx).Consistency(cl).Exec(); err != nil {
				return nil, err
			}
		}
	}
	r, err := s.scanAt(ctx, pid, 0, cl)
	if err != nil {
		return nil, err
	}
	c.deleted, c.kept, c.keptPnr, c.keptUUID = r.deleted, r.kept, r.pnr, r.uuid
	if !rec.exists {
		return c, nil // the id's first claim
	}
	applied, err := s.changeClaim(ctx, pid, c, s.sql.claimPublish, c.highest(), c.fence, rec.done)
	if err != nil {
		return nil, err
	}
	if !applied {
		return nil, nil
	}
	if err := s.fenceAbove(ctx, pid, c.highest(), c.fence); err != nil {
		return nil, err
	}
	return c, nil
}

// fenceAbove writes, at timestamp fence, a range tombstone over pid's
// numbers above h in h's partition and the next.
func (s *Store) fenceAbove(ctx context.Context, pid string, h, fence int64) error {
	p := s.partition(h)
	return s.session.Query(s.sql.claimFence, pid, []int64{p, p + 1}, h).WithTimestamp(fence).
		WithContext(ctx).Consistency(s.cfg.guardCL()).Exec()
}

// readClaim reads pid's claim record at the guard's consistency; exists is
// false when the id was never claimed.
func (s *Store) readClaim(ctx context.Context, pid string) (claimRecord, error) {
	m := map[string]any{}
	err := s.session.Query(s.sql.claimRead, pid).WithContext(ctx).Consistency(s.cfg.guardCL()).MapScan(m)
	if errors.Is(err, gocql.ErrNotFound) {
		return claimRecord{}, nil
	}
	if err != nil {
		return claimRecord{}, err
	}
	return recordFrom(m), nil
}

// claimOwner reads the token of pid's current claim at the guard's
// consistency.
func (s *Store) claimOwner(ctx context.Context, pid string) (gocql.UUID, error) {
	var owner gocql.UUID
	err := s.session.Query(s.sql.claimVerify, pid).WithContext(ctx).Consistency(s.cfg.guardCL()).Scan(&owner)
	return owner, err
}

// changeClaim applies one of the owner's changes of its record (its
// publication, a renewal, a far mark), conditioned on the claim's token and
// rev: applied false means another writer took the id.
func (s *Store) changeClaim(ctx context.Context, pid string, c *claim, stmt string, values ...any) (applied bool, err error) {
	args := append(values, c.rev+1, pid, c.token, c.rev)
	applied, err = s.session.Query(stmt, args...).WithContext(ctx).Consistency(s.cfg.guardCL()).SerialConsistency(s.cfg.serialCL).
		MapScanCAS(map[string]any{})
	if err == nil && applied {
		c.rev++
	}
	return applied, err
}

// writeClaimed stores one atomic write under st's claim of the id (taking
// the claim first when st has none): the rejection when it was refused, or
// an error when the outcome is unknown, which leaves the claim in doubt
// (dropped: the next write claims the id again). st is locked.
func (j *Journal) writeClaimed(ctx context.Context, w journal.AtomicWrite, st *idTags) (rejected, unknown error) {
	s := j.s
	pid := w.PersistenceID
	first, last := w.Events[0].SequenceNr, w.Events[len(w.Events)-1].SequenceNr
	pnr := s.partition(first)
	conflict := &journal.ConflictError{PersistenceID: pid, SequenceNr: first}
	defer func() {
		if unknown != nil {
			st.claim = nil
		}
	}()
	if st.claim == nil {
		c, err := s.claimID(ctx, pid, first == 1)
		var re gocql.RequestError
		if errors.As(err, &re) && re.Code() == gocql.ErrCodeInvalid && missingTable(re.Message(), claimsTable) {
			return journal.Reject("%w: keyspace %s has no %s table, which the claims guard needs; create it with Migrator.Migrate, WithMigrate or `annals migrate --store URL` (or write with WithWriteGuard(GuardConditional)): %w",
				ErrSchemaMissing, s.cfg.keyspace, claimsTable, err), nil
		}
		if err != nil {
			return nil, err
		}
		if c == nil { // another writer took the id while this one claimed it
			return conflict, nil
		}
		st.claim = c
	}
	c := st.claim
	renumbered := st.recoveredTo == c.kept && c.kept > c.deleted &&
		st.recoveredUUID != (gocql.UUID{}) && c.keptUUID != (gocql.UUID{}) && st.recoveredUUID != c.keptUUID
	if st.recoveredTo > c.highest() || renumbered {
		// This process's recovery of the id read rows that the claim
		// no longer finds (an earlier owner's, landed after the claim
		// before this one read and hidden by its tombstone), or another
		// row at the number it read last (the new owner wrote the hidden
		// rows' numbers again): the writer built on events that are
		// gone, and recovers again. Checked at every write, since the
		// claim may have been taken by a recovery (settled) after the
		// writer's.
		st.recoveredTo, st.recoveredUUID = 0, gocql.UUID{}
		s.tags.dropHandoff(pid)
		return conflict, nil
	}
	if first <= c.highest() {
		return conflict, nil
	}
	lost := func() (error, error) { // another writer took the id
		st.claim = nil
		return conflict, nil
	}
	if first-1 > c.highest() {
		// Numbers far apart (see the package documentation).
		if c.kept > c.deleted && pnr > c.keptPnr+1 {
			// What the claim knows may be older than a deletion by
			// another process: read the id again before refusing.
			r, err := s.scanAt(ctx, pid, 0, s.cfg.guardCL())
			if err != nil {
				return nil, err
			}
			if r.kept > c.kept {
				// Another writer wrote beyond the claim: it took the id.
				// Rows stored further on, past the partition after its
				// highest number, would lie beyond its tombstone.
				return lost()
			}
			c.deleted, c.kept, c.keptPnr, c.keptUUID = r.deleted, r.kept, r.pnr, r.uuid
			if first <= c.highest() {
				return conflict, nil
			}
		}
		if c.kept > c.deleted {
			if pnr > c.keptPnr+1 {
				return farRejection(pid, first, last, pnr, c.kept, c.keptPnr, s.cfg.partitionSize), nil
			}
		} else if first-1 > c.deleted {
			// The id keeps no events: the mark moves to first-1, announced
			// in the claim first, so that a writer taking the id over
			// records it too before it reads the highest number.
			applied, err := s.changeClaim(ctx, pid, c, s.sql.claimFar, first-1)
			if err != nil {
				return nil, err
			}
			if !applied {
				return lost()
			}
			if err := s.session.Query(s.sql.setDeletedTo, pid, first-1).WithContext(ctx).Consistency(s.cfg.guardCL()).Exec(); err != nil {
				return nil, err
			}
			c.deleted = first - 1
		}
	}
	ts := max(s.micros(), c.last+1)
	if ts >= c.until-s.cfg.claimLease.Microseconds()/2 {
		until := ts + s.cfg.claimLease.Microseconds()
		applied, err := s.changeClaim(ctx, pid, c, s.sql.claimRenew, until)
		if err != nil {
			return nil, err
		}
		if !applied {
			return lost()
		}
		c.until = until
	}
	uuids := s.eventUUIDs(w, st)
	b := s.session.Batch(gocql.UnloggedBatch).WithContext(ctx).WithTimestamp(ts)
	b.SetConsistency(s.cfg.guardCL())
	s.addEventRows(b, w, pnr, uuids)
	if err := b.Exec(); err != nil {
		return invalidWrite(err, w)
	}
	c.last = ts
	if s.cfg.afterClaimedRows != nil {
		s.cfg.afterClaimedRows(pid)
	}
	owner, err := s.claimOwner(ctx, pid)
	if err != nil {
		return nil, err
	}
	if owner != c.token {
		st.claim = nil
		if rejected, err := s.superseded(ctx, pid, c, first, last, pnr, uuids[0]); rejected != nil || err != nil {
			return rejected, err
		}
		// Kept. The new owner may have written these events' tag rows
		// already (the repair before its first write) and moved the id's
		// tag progress past them: this process's tag state is older than
		// that. It is read again (a repair up to first-1), so that the rows
		// are written only where the progress does not cover them, and the
		// progress is not set back.
		st.loaded = false
	} else {
		c.kept, c.keptPnr, c.keptUUID = last, pnr, uuids[len(uuids)-1]
	}
	if err := s.tags.written(ctx, w, uuids, st); err != nil {
		return nil, err
	}
	return nil, nil
}

// superseded settles a write of claim c that another writer took while
// the write was stored: nil when the write is kept, its rejection when it
// never will be, ErrSuperseded when that is not known before ctx ends.
//
//   - Its rows (one mutation of one partition: all or none, found by the
//     first one's timeuuid) not visible: a later claim's tombstone hides
//     them, for good.
//   - Visible, once a second claim completed after the first one after
//     c: that second one wrote the first one's tombstone before reading,
//     so whether the rows are visible no longer changes, and a second
//     look at them decides (the first look may have come before that
//     tombstone).
//   - Visible, once only the first claim after c completed: kept if its
//     highest number covers them; else its tombstone hides them. That
//     tombstone is written again before the writer is told, since that
//     claim's owner may have stopped before writing it, and no reader may
//     find rows of a refused write.
//   - Visible, and no claim after c completed yet: it reads the record
//     again until one does.
func (s *Store) superseded(ctx context.Context, pid string, c *claim, first, last, pnr int64, uuid gocql.UUID) (rejected, unknown error) {
	conflict := &journal.ConflictError{PersistenceID: pid, SequenceNr: first}
	visible, err := s.rowVisible(ctx, pid, pnr, first, uuid)
	if err != nil {
		return nil, err
	}
	if !visible {
		return conflict, nil
	}
	// The wait holds the id's state: bounded by the store's timeout too.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	wait := time.NewTimer(0)
	defer wait.Stop()
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s %d–%d: %w", ErrSuperseded, pid, first, last, ctx.Err())
		case <-wait.C:
		}
		rec, err := s.readClaim(ctx, pid)
		if err != nil {
			return nil, err
		}
		switch {
		case rec.done <= c.fence: // no claim after c completed yet
		case rec.prior > c.fence:
			// Not rec.base: the later claim's highest number may cover
			// the numbers because the first one's owner wrote them.
			if visible, err = s.rowVisible(ctx, pid, pnr, first, uuid); err != nil {
				return nil, err
			}
			if visible {
				return nil, nil
			}
			return conflict, nil
		case rec.base >= last:
			return nil, nil
		default:
			if err := s.fenceAbove(ctx, pid, rec.base, rec.done); err != nil {
				return nil, err
			}
			return conflict, nil
		}
		wait.Reset(pause)
	}
}

// rowVisible reports whether a read finds pid's row first with timeuuid
// uuid in partition pnr.
func (s *Store) rowVisible(ctx context.Context, pid string, pnr, first int64, uuid gocql.UUID) (bool, error) {
	var seq int64
	err := s.session.Query(s.sql.rowExists, pid, pnr, first, uuid).WithContext(ctx).Consistency(s.cfg.guardCL()).Scan(&seq)
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// farRejection is the rejection of a write whose first number lies beyond
// the partition after the one holding the id's highest number.
func farRejection(pid string, first, last, pnr, kept, keptPnr, size int64) error {
	gap := fmt.Sprintf("partition %d", keptPnr+1)
	if pnr-1 > keptPnr+1 {
		gap = fmt.Sprintf("partitions %d–%d", keptPnr+1, pnr-1)
	}
	return journal.Reject("%w: %s %d–%d would be stored in partition %d, and the id's highest number, %d, is in partition %d: "+
		"%s would be empty between them, and a replay stops at the first empty partition (of %d numbers)",
		journal.ErrInvalidArgument, pid, first, last, pnr, kept, keptPnr, gap, size)
}

// rowStamp is what settled reads of a row: its number, write timestamp
// and timeuuid.
type rowStamp struct {
	seq, written int64
	uuid         gocql.UUID
}

// settlement is what settled found of a repair's rows.
type settlement int

const (
	// allSettled: every row is settled.
	allSettled settlement = iota
	// rowsHidden: the first row not settled is an earlier owner's that
	// the id's completed claim hides (its tombstone is written again).
	rowsHidden
	// rowsUnknown: the first row not settled belongs to a claim being
	// taken, or a claim completed while the rows were read.
	rowsUnknown
	// claimTaken: the rows belonged to a claim taken and abandoned (its
	// bound passed before it completed), and this store took the id to
	// settle them: the rows read may be gone, and are read again.
	claimTaken
)

// settled returns the highest number up to which the rows a repair of pid
// read (ascending, from the number after from up to upTo) are rows that no
// claim hides later, so that their tag rows and the tag_scanning mark may
// be written: upTo when all are, from when the first row is not. before is
// the id's claim record as read before the rows. A row is settled when
// the record read after it shows, with no claim completed since before:
//
//   - no claim: no claimed writer ever wrote the id;
//   - a completed claim whose highest number covers the row: no claim
//     completed since the row was read, later claims' tombstones lie
//     above their own highest numbers, which are no lower, and the
//     earlier ones were written before this one read the id;
//   - the row stamped above the current claim's fence: the current
//     owner's write, stored before any later claim took the id, so within
//     that claim's highest number;
//   - the record's first claim, never taken (base is minus its fence):
//     the row was written by its owner or before claims.
//
// Any other row is an earlier owner's, above the latest completed claim's
// highest number: hidden when the current claim completed (settled then
// writes that claim's tombstone again, as its owner may have stopped
// before it), or not known while it is being taken; a take whose bound
// passed is abandoned, and settled takes the id itself (st.claim).
func (s *Store) settled(ctx context.Context, pid string, st *idTags, before claimRecord, from, upTo int64, rows []rowStamp) (int64, settlement, error) {
	if len(rows) == 0 {
		return upTo, allSettled, nil
	}
	rec, err := s.readClaim(ctx, pid)
	if err != nil {
		return 0, 0, err
	}
	if !rec.exists {
		return upTo, allSettled, nil
	}
	if rec.done != before.done {
		return from, rowsUnknown, nil
	}
	to := from
	for _, r := range rows {
		switch {
		case rec.done > 0 && r.seq <= rec.base:
		case r.written > rec.fence:
		case rec.base == -rec.fence:
		case rec.done == rec.fence:
			return to, rowsHidden, s.fenceAbove(ctx, pid, rec.base, rec.done)
		case s.micros() > rec.until:
			c, err := s.claimID(ctx, pid, false)
			if err != nil {
				return 0, 0, err
			}
			if c == nil {
				return to, rowsUnknown, nil // another writer took it first
			}
			st.claim = c
			return from, claimTaken, nil
		default:
			return to, rowsUnknown, nil
		}
		to = r.seq
	}
	return upTo, allSettled, nil
}
