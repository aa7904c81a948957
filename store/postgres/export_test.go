package postgres

import (
	"time"

	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
)

// WithBeforeCommitSQL runs stmt inside every write transaction after its
// inserts, before its commit (tests: a slow or killed writer).
func WithBeforeCommitSQL(stmt string) Option { return func(c *config) { c.beforeCommitSQL = stmt } }

// OrderedPlan is the statement sent before every offset-ordered page query.
const OrderedPlan = orderedPlan

// OrderedQueries returns the store's offset-ordered page queries by name.
func OrderedQueries(s *Store) map[string]string {
	return map[string]string{
		"bySlices":  s.sql.bySlices,
		"byTag":     s.sql.byTag,
		"byType":    s.sql.byType,
		"byAnyType": s.sql.byAnyType,
	}
}

// WithClockSQL makes TimestampOrder's writes stamp their rows from the SQL
// expression expr instead of transaction_timestamp() (tests: a clock that
// steps back).
func WithClockSQL(expr string) Option { return func(c *config) { c.clock = expr } }

// KnownStamp returns the sequence number and db_timestamp of the last
// event of persistenceID the store knows, if any (see knownStamps).
func KnownStamp(s *Store, persistenceID string) (int64, time.Time, bool) {
	s.known.mu.Lock()
	defer s.known.mu.Unlock()
	st, ok := s.known.latest[persistenceID]
	return st.seq, time.UnixMicro(st.micros), ok
}

// StampReads returns how many ids the store's TimestampOrder writes read
// the previous event of, rather than knowing it.
func StampReads(s *Store) int64 { return s.known.reads.Load() }

// RecoveryStatement returns a recovery statement of the store and its
// arguments for a recovery of persistenceID from the latest snapshot to
// its end: recoveryOpenSQL when open (empty in a layout without it),
// else recoverySQL.
func RecoveryStatement(s *Store, persistenceID string, open bool) (string, []any) {
	crit := snapshot.Latest()
	req, _ := recovery.Check(recovery.Request{PersistenceID: persistenceID, Snapshot: &crit})
	if open {
		sql, args, ok := (&Journal{s: s}).recoveryStatement(req)
		if !ok {
			return "", nil
		}
		return sql, args
	}
	return s.sql.recovery, recoveryArgs(req)
}

// JournalTable returns the quoted name of the store's event journal table.
func JournalTable(s *Store) string { return table(s.cfg.schema, "event_journal") }

// Channel returns the NOTIFY channel of the store's writes.
func Channel(s *Store) string { return s.channel }
