package cassandra

import (
	"context"
	"errors"
	"fmt"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// WriteGuard selects how the store refuses a second writer of an id; see
// "Conflicts" in the package documentation. A keyspace has one guard,
// recorded at its first open (see WithWriteGuard).
type WriteGuard int

const (
	// GuardClaims, the guard of keyspaces Annals creates: a writer claims
	// an id with one lightweight transaction before its first write, then
	// writes plain batches, each acknowledged once a read finds the claim
	// still its own; an earlier owner's later rows are hidden by the
	// claim's tombstone.
	GuardClaims WriteGuard = iota + 1
	// GuardConditional: every atomic write is a conditional batch (a
	// Paxos round per write); the guard of keyspaces that held events
	// before Annals recorded a guard (Pekko's, or earlier Annals').
	GuardConditional
)

// String returns the guard's name, as write_guard spells it.
func (g WriteGuard) String() string {
	switch g {
	case GuardClaims:
		return "claims"
	case GuardConditional:
		return "conditional"
	}
	return fmt.Sprintf("WriteGuard(%d)", int(g))
}

// parseWriteGuard reads a guard's name.
func parseWriteGuard(v string) (WriteGuard, error) {
	switch v {
	case "claims":
		return GuardClaims, nil
	case "conditional":
		return GuardConditional, nil
	}
	return 0, fmt.Errorf("unknown write guard %q (want claims or conditional)", v)
}

// WithWriteGuard sets how the store refuses a second writer of an id.
// Every process writing a keyspace must use the same guard, since neither
// sees the other's writers, so the keyspace records it at its first open
// (in annals_settings, as write_guard) and later opens adopt it:
//
//   - Without this option, a store uses the recorded guard. A keyspace
//     with none records GuardClaims when it has the claims table and no
//     events yet, or claims in that table (written by an earlier Annals
//     with the claims guard), and GuardConditional otherwise (events
//     written by Pekko or by Annals before guards were recorded, whose
//     writers use no guard or the conditional one).
//   - With it, a keyspace with no recorded guard records g; one that
//     records another guard fails Open with ErrInvalidConfig.
//
// A keyspace's guard moves from conditional to claims only while no
// process writes it (see docs/cassandra.md, "Claims"); not back, since
// the conditional guard relies on a column the claims guard does not keep.
func WithWriteGuard(g WriteGuard) Option { return func(c *config) { c.guard = g } }

// WriteGuard returns the keyspace's guard, which this store writes with.
func (s *Store) WriteGuard() WriteGuard { return s.cfg.guard }

// settingWriteGuard is the annals_settings row that fixes the keyspace's
// write guard at its first open.
const settingWriteGuard = "write_guard"

// fixWriteGuard adopts the keyspace's recorded guard, or records one (a
// lightweight transaction, so that two first opens agree): see
// WithWriteGuard. A keyspace written with the claims guard and without
// the claims table (moved to claims before its migration) fails with
// ErrSchemaMissing: every write and recovery would fail.
func (s *Store) fixWriteGuard(ctx context.Context) error {
	tables, _, _, err := s.inspect(ctx)
	if err != nil {
		return err
	}
	hasClaims := tables[claimsTable]
	var v string
	err = s.session.Query(s.sql.readSetting, settingWriteGuard).WithContext(ctx).Consistency(s.cfg.guardCL()).Scan(&v)
	if errors.Is(err, gocql.ErrNotFound) {
		want := s.cfg.guard
		if want == 0 {
			if want, err = s.firstGuard(ctx, hasClaims); err != nil {
				return err
			}
		}
		if v, err = s.recordSetting(ctx, settingWriteGuard, want.String()); err != nil {
			return s.errs.Map(ctx, "record the write guard", err, errClosed)
		}
	} else if err != nil {
		return s.errs.Map(ctx, "read the write guard", err, errClosed)
	}
	have, err := parseWriteGuard(v)
	if err != nil {
		return fmt.Errorf("%w: keyspace %s records %s: %w", ErrInvalidConfig, s.cfg.keyspace, settingWriteGuard, err)
	}
	if s.cfg.guard != 0 && have != s.cfg.guard {
		return fmt.Errorf("%w: keyspace %s is written with the %s write guard; it cannot be opened with the %s guard (its writers would not see each other); see WithWriteGuard",
			ErrInvalidConfig, s.cfg.keyspace, have, s.cfg.guard)
	}
	s.cfg.guard = have
	if have == GuardClaims && !hasClaims {
		return fmt.Errorf("%w: keyspace %s is written with the claims guard and has no %s table; create it with `annals migrate --store URL`, Migrator.Migrate or WithMigrate",
			ErrSchemaMissing, s.cfg.keyspace, claimsTable)
	}
	return nil
}

// firstGuard is the guard a keyspace with none recorded takes when no
// guard is configured: claims when it has the claims table (hasClaims)
// and no events, or when its claims table holds claims (an earlier Annals
// wrote it with the claims guard, whose writes the conditional guard's
// column does not track).
func (s *Store) firstGuard(ctx context.Context, hasClaims bool) (WriteGuard, error) {
	if !hasClaims {
		return GuardConditional, nil
	}
	if held, err := s.holdsRow(ctx, s.sql.anyClaim); err != nil || held {
		return GuardClaims, err
	}
	if held, err := s.holdsRow(ctx, s.sql.anyEvent); err != nil || held {
		return GuardConditional, err
	}
	return GuardClaims, nil
}

// holdsRow reports whether stmt, a select of one persistence id, finds a
// row at the guard's consistency.
func (s *Store) holdsRow(ctx context.Context, stmt string) (bool, error) {
	var pid string
	err := s.session.Query(stmt).WithContext(ctx).Consistency(s.cfg.guardCL()).Scan(&pid)
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, s.errs.Map(ctx, "read whether the keyspace holds claims or events", err, errClosed)
	}
	return true, nil
}
