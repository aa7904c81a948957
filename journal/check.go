package journal

import (
	"strings"
	"unicode/utf8"
)

// CheckPersistenceID returns an error wrapping [ErrInvalidArgument] when
// persistenceID is empty, is not valid UTF-8 or contains a NUL byte (which
// PostgreSQL's text cannot hold: every store refuses such ids, so that any
// journal can be copied to any store); op names the operation.
func CheckPersistenceID(op, persistenceID string) error {
	switch {
	case persistenceID == "":
		return invalid("%s of an empty persistence id", op)
	case !utf8.ValidString(persistenceID):
		return invalid("%s of persistence id %q, which is not valid UTF-8", op, persistenceID)
	case strings.IndexByte(persistenceID, 0) >= 0:
		return invalid("%s of persistence id %q, which contains a NUL byte", op, persistenceID)
	}
	return nil
}

// CheckAtomicWrite returns nil when w obeys the rules of [AtomicWrite], or an
// error wrapping both [ErrRejected] and [ErrInvalidArgument] that names the
// first broken rule. Stores call it before storing anything of w.
func CheckAtomicWrite(w AtomicWrite) error {
	if w.PersistenceID == "" {
		return Reject("%w", invalid("atomic write has an empty persistence id"))
	}
	if err := CheckPersistenceID("atomic write", w.PersistenceID); err != nil {
		return Reject("%w", err)
	}
	if len(w.Events) == 0 {
		return Reject("%w", invalid("atomic write for %q has no events", w.PersistenceID))
	}
	first := w.Events[0].SequenceNr
	for i, e := range w.Events {
		if e.PersistenceID != w.PersistenceID {
			return Reject("%w", invalid("event %d of the atomic write for %q belongs to %q", i, w.PersistenceID, e.PersistenceID))
		}
		if e.SequenceNr < 1 {
			return Reject("%w", invalid("event %d of %q has sequence number %d; sequence numbers start at 1", i, w.PersistenceID, e.SequenceNr))
		}
		if e.SequenceNr != first+int64(i) {
			return Reject("%w", invalid("events of the atomic write for %q are not consecutive: event %d has sequence number %d, want %d", w.PersistenceID, i, e.SequenceNr, first+int64(i)))
		}
	}
	return nil
}

// CheckReplay returns nil when the arguments of a Replay call are valid, or an
// error wrapping [ErrInvalidArgument]. It allows from < 1 (read as 1),
// from > to and max = 0 (both replay nothing).
func CheckReplay(persistenceID string, from, to, max int64) error {
	if err := CheckPersistenceID("replay", persistenceID); err != nil {
		return err
	}
	switch {
	case to < 0:
		return invalid("replay of %q with negative upper bound %d", persistenceID, to)
	case max < 0:
		return invalid("replay of %q with negative limit %d", persistenceID, max)
	}
	return nil
}

// CheckID returns an error wrapping [ErrInvalidArgument] when persistenceID
// is empty or bound is negative; op names the operation in the message.
func CheckID(op, persistenceID string, bound int64) error {
	if err := CheckPersistenceID(op, persistenceID); err != nil {
		return err
	}
	switch {
	case bound < 0:
		return invalid("%s of %q with negative sequence number %d", op, persistenceID, bound)
	}
	return nil
}

// Results collects per-write outcomes of a Write call: it returns nil when
// every entry is nil (the happy path allocates nothing), else errs.
func Results(errs []error) []error {
	for _, e := range errs {
		if e != nil {
			return errs
		}
	}
	return nil
}

// CheckPayloads returns nil when no event of w has a payload larger than
// maxPayload bytes, or a rejection (wrapping [ErrRejected] and
// [ErrInvalidArgument]) naming the first that has. Stores with a payload
// limit call it beside CheckAtomicWrite.
func CheckPayloads(w AtomicWrite, maxPayload int) error {
	for _, e := range w.Events {
		if len(e.Payload) > maxPayload {
			return Reject("%w", invalid("event %d of %q has a %d-byte payload, above the limit of %d bytes", e.SequenceNr, w.PersistenceID, len(e.Payload), maxPayload))
		}
	}
	return nil
}
