// Package recovery is the storage contract for reading what an entity's
// recovery needs (its highest sequence number, the snapshot to start from
// and the events after it) in one call, which a store answers in one round
// trip where it can.
//
// It is an optional capability: a journal that offers it implements
// [Reader], and the entity runtime uses it when the journal reads the
// snapshots the host is configured with. Without it, a recovery makes three
// calls (HighestSequenceNr, snapshot Load, Replay), which is also what
// [Read] does and what a Reader's answer must equal.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
)

// DefaultMaxEvents is the number of events a read returns when
// Request.MaxEvents is 0: enough for a small entity's whole recovery, few
// enough that a large one's first read stays one page.
const DefaultMaxEvents = 1000

// Request says what one recovery reads.
type Request struct {
	// PersistenceID is the entity's id (not empty).
	PersistenceID string
	// Snapshot selects the snapshot to start from (the youngest that
	// matches); nil reads no snapshot: the events start at 1.
	Snapshot *snapshot.Criteria
	// ToSequenceNr is the last event to read (inclusive); 0 means no bound.
	ToSequenceNr int64
	// MaxEvents bounds Result.Events (0: DefaultMaxEvents); the rest is
	// read with Journal.Replay from the last event returned.
	MaxEvents int
}

// Result is what a recovery read returns.
//
// Rules every Reader keeps:
//   - Highest is what HighestSequenceNr(ctx, id, 0) returns: the highest
//     sequence number the id ever stored, deleted events included (0 for
//     an unknown id).
//   - Snapshot is the youngest snapshot Request.Snapshot matches, as
//     snapshot.Store.Load returns it; HasSnapshot says whether there is
//     one (never with a nil Request.Snapshot).
//   - Events are the stored events after the snapshot's sequence number
//     (after 0 without one) and not beyond Request.ToSequenceNr nor
//     Highest, ascending, at most MaxEvents of them, as Replay returns
//     them. More is true when MaxEvents were returned and the last is
//     below both bounds: later ones may exist.
//   - Events deleted with no snapshot covering them are not read, and
//     nothing stands for them: the first event may follow the snapshot's
//     number (or 0) by more than one. A recovery rebuilds the state from
//     the events that remain, at Highest, as Akka and Pekko do; an id
//     whose events were all deleted reads none until it writes again,
//     and then reads the new events alone.
//   - The three are read consistently: the events and the highest number
//     are those stored when the snapshot was selected, or later.
type Result struct {
	Highest     int64
	Snapshot    snapshot.Snapshot
	HasSnapshot bool
	Events      []journal.Repr
	More        bool
}

// Reader reads a recovery in one call. A journal that implements it
// implements journal.Journal too, and the two agree.
type Reader interface {
	// ReadsSnapshotsOf reports whether ReadRecovery reads its snapshots
	// from snaps: the same database and tables. Callers use ReadRecovery
	// only with the snapshot store it reports true for, or with no snapshot
	// store (Request.Snapshot nil); snaps nil is always true.
	ReadsSnapshotsOf(snaps snapshot.Store) bool
	// ReadRecovery reads the recovery req asks for; see Result for the
	// rules. It fails with an error wrapping journal.ErrInvalidArgument for
	// a bad request, and journal.ErrClosed once the journal is closed.
	ReadRecovery(ctx context.Context, req Request) (Result, error)
}

// BatchReader is a Reader that also reads several recoveries in one call,
// in one round trip where the store can. The journal front
// (engine.Front) groups into such calls the recoveries that wait for a
// turn among its MaxReads: a burst of recoveries (a service restarting
// under traffic) then pays one round trip per group instead of one each.
type BatchReader interface {
	Reader
	// ReadRecoveries reads the recoveries reqs ask for (at least one,
	// each checked with Check). Its results are in the order of reqs:
	// results[i] is what ReadRecovery(ctx, reqs[i]) would return at the
	// time of the call, and follows Result's rules on its own; two
	// requests need not be read from one snapshot of the database. An
	// error fails the whole call: it returns no results, and the caller
	// may read the requests one by one to tell which one fails. It fails
	// with journal.ErrClosed once the journal is closed.
	ReadRecoveries(ctx context.Context, reqs []Request) ([]Result, error)
}

// Check checks req's arguments and fills its defaults.
func Check(req Request) (Request, error) {
	if err := journal.CheckID("recovery", req.PersistenceID, 0); err != nil {
		return req, err
	}
	if req.ToSequenceNr < 0 || req.MaxEvents < 0 {
		return req, fmt.Errorf("%w: recovery of %q: negative bound (to %d, max events %d)", journal.ErrInvalidArgument, req.PersistenceID, req.ToSequenceNr, req.MaxEvents)
	}
	if req.ToSequenceNr == 0 {
		req.ToSequenceNr = math.MaxInt64
	}
	if req.MaxEvents == 0 {
		req.MaxEvents = DefaultMaxEvents
	}
	return req, nil
}

// Read reads the recovery req asks for with three calls, as a journal
// without the capability is read: the highest number from j, the snapshot
// from snaps (when req.Snapshot is set; snaps may then not be nil), the
// events from j. It is the reference a Reader's answers are checked against.
func Read(ctx context.Context, j journal.Journal, snaps snapshot.Store, req Request) (Result, error) {
	req, err := Check(req)
	if err != nil {
		return Result{}, err
	}
	if req.Snapshot != nil && snaps == nil {
		return Result{}, errors.New("recovery: a snapshot was asked for and there is no snapshot store")
	}
	var res Result
	if res.Highest, err = j.HighestSequenceNr(ctx, req.PersistenceID, 0); err != nil {
		return Result{}, err
	}
	if req.Snapshot != nil {
		if res.Snapshot, res.HasSnapshot, err = snaps.Load(ctx, req.PersistenceID, *req.Snapshot); err != nil {
			return Result{}, err
		}
	}
	from, to := res.Snapshot.Metadata.SequenceNr+1, min(req.ToSequenceNr, res.Highest)
	if from > to {
		return res, nil
	}
	res.Events = make([]journal.Repr, 0, EventsCap(from, to, req.MaxEvents))
	for r, err := range j.Replay(ctx, req.PersistenceID, from, to, int64(req.MaxEvents)) {
		if err != nil {
			return Result{}, err
		}
		res.Events = append(res.Events, r)
	}
	res.More = len(res.Events) == req.MaxEvents && res.Events[len(res.Events)-1].SequenceNr < to
	return res, nil
}

// maxEventsCap bounds EventsCap: a recovery of more events grows its
// slice as it reads them.
const maxEventsCap = 256

// EventsCap returns the capacity to give the Events of a Result that will
// hold an id's events numbered from..to, at most maxEvents of them: the
// size of the range, bounded by maxEvents and by 256, so that a small
// entity's events are stored without growing the slice (growing it from
// empty cost a fifth of a SQLite recovery's CPU), while a range with gaps
// (deleted or missing numbers) reserves no more than 256 events it may
// not hold. It is 0 when from > to or maxEvents <= 0, and never negative,
// whatever the numbers. It suits a range bounded by the id's highest
// number; a replay to math.MaxInt64 would reserve 256 events for any id.
func EventsCap(from, to int64, maxEvents int) int {
	if from > to || maxEvents <= 0 {
		return 0
	}
	n := uint64(to - from) // the range's size less one; no overflow as unsigned
	if n >= maxEventsCap {
		n = maxEventsCap - 1
	}
	return int(min(n+1, uint64(maxEvents)))
}

// ThreeCalls returns a Reader over a journal without the capability: it
// reads each recovery with Read on j and snaps, and reads the snapshots
// of snaps only (and none). It lets a journal and snapshot store be held
// to the Reader's rules, as the compliance kit does.
func ThreeCalls(j journal.Journal, snaps snapshot.Store) Reader { return threeCalls{j, snaps} }

type threeCalls struct {
	j     journal.Journal
	snaps snapshot.Store
}

func (r threeCalls) ReadsSnapshotsOf(s snapshot.Store) bool { return s == nil || s == r.snaps }

func (r threeCalls) ReadRecovery(ctx context.Context, req Request) (Result, error) {
	return Read(ctx, r.j, r.snaps, req)
}
