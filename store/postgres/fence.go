package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/annals-go/annals/journal"
)

var _ journal.FencedWriter = (*Journal)(nil)

// WriteFenced implements journal.FencedWriter: the writes whose tokens
// name leases of this store's Membership (one made by Store.Membership of
// this Store) are stored only if those leases are held where the call
// commits.
//
// The call's transaction first reads the tokens' lease rows FOR KEY SHARE,
// in the same batch (one round trip) as the inserts, and fails when one is
// not held by its token's holder at its epoch, so nothing is stored. A
// take-over changes the lease's epoch, which a unique index makes a key
// column: it needs the row's strongest lock and waits until the write
// commits, while the holder's heartbeats, which only move expires, never
// wait. When the check fails, the call finds the leases that are lost,
// refuses their writes with a *journal.FencedError and sends the others
// again.
func (j *Journal) WriteFenced(ctx context.Context, writes []journal.AtomicWrite, tokens []journal.FenceToken) ([]error, error) {
	if len(tokens) != len(writes) {
		return nil, fmt.Errorf("%w: %d fencing tokens for %d atomic writes", journal.ErrInvalidArgument, len(tokens), len(writes))
	}
	return j.write(ctx, writes, tokens)
}

// checks reports whether the journal checks t: a token of this store's
// membership tables.
func (j *Journal) checks(t journal.FenceToken) bool {
	m, ok := t.Store.(*Membership)
	return ok && !t.IsZero() && m.s == j.s
}

// leaseCheck is the fencing check sent before a call's inserts: the
// distinct leases its pending writes are made under.
type leaseCheck struct {
	clusters, leases, names, incarnations []string
	epochs                                []int64
}

// newLeaseCheck returns the check of the tokens of writes[pending...]
// that the journal checks; nil when there are none.
func (j *Journal) newLeaseCheck(tokens []journal.FenceToken, pending []int) *leaseCheck {
	if tokens == nil {
		return nil
	}
	var c *leaseCheck
	seen := map[journal.FenceToken]bool{}
	for _, i := range pending {
		t := tokens[i]
		if !j.checks(t) || seen[t] {
			continue
		}
		seen[t] = true
		if c == nil {
			c = &leaseCheck{}
		}
		c.clusters, c.leases = append(c.clusters, t.Cluster), append(c.leases, t.Lease)
		c.names, c.incarnations = append(c.names, t.Holder), append(c.incarnations, t.HolderIncarnation)
		c.epochs = append(c.epochs, t.Epoch)
	}
	return c
}

// args returns the arguments of statements.checkLeases.
func (c *leaseCheck) args() []any {
	return []any{c.clusters, c.leases, c.names, c.incarnations, c.epochs, len(c.leases)}
}

// checkLeasesSQL fails with a division by zero (SQLSTATE 22012) unless
// every lease of its arrays is held by its holder at its epoch, locking
// the rows it finds FOR KEY SHARE until the transaction ends. SQL has no
// statement that raises an error of its own choosing; the failing division
// is not constant, so the planner cannot fold it.
func checkLeasesSQL(leases string) string {
	return `SELECT 1 / CASE WHEN count(*) = $6 THEN 1 ELSE 0 END FROM (
		SELECT FROM ` + leases + ` l
		JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) AS t(cluster, name, owner_name, owner_incarnation, epoch)
			ON l.cluster = t.cluster AND l.name = t.name AND l.owner_name = t.owner_name
			AND l.owner_incarnation = t.owner_incarnation AND l.epoch = t.epoch
		FOR KEY SHARE OF l) held`
}

// heldLeasesSQL returns the indexes (1-based) of its arrays' leases held
// by their holders at their epochs, without locking.
func heldLeasesSQL(leases string) string {
	return `SELECT t.n FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) WITH ORDINALITY
			AS t(cluster, name, owner_name, owner_incarnation, epoch, n)
		JOIN ` + leases + ` l ON l.cluster = t.cluster AND l.name = t.name AND l.owner_name = t.owner_name
			AND l.owner_incarnation = t.owner_incarnation AND l.epoch = t.epoch`
}

// isLeaseCheckFailure reports whether err is the failure of checkLeasesSQL.
func isLeaseCheckFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}

// fenced refuses the writes of writes[pending...] whose leases c finds lost
// (results get a *journal.FencedError) and returns the pending writes
// left; lost is false when every lease was held again at the read.
func (j *Journal) fenced(ctx context.Context, writes []journal.AtomicWrite, tokens []journal.FenceToken, pending []int, c *leaseCheck, results []error) (left []int, lost bool, err error) {
	a := c.args()
	rows, err := j.s.pool.Query(ctx, j.s.sql.heldLeases, a[:5]...)
	if err != nil {
		return nil, false, j.s.errs.Map(ctx, "check leases", err, journal.ErrClosed)
	}
	held := map[journal.FenceToken]bool{}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, false, j.s.errs.Map(ctx, "check leases", err, journal.ErrClosed)
		}
		held[journal.FenceToken{Cluster: c.clusters[n-1], Lease: c.leases[n-1], Holder: c.names[n-1],
			HolderIncarnation: c.incarnations[n-1], Epoch: c.epochs[n-1]}] = true
	}
	if err := rows.Err(); err != nil {
		return nil, false, j.s.errs.Map(ctx, "check leases", err, journal.ErrClosed)
	}
	for _, i := range pending {
		t := tokens[i]
		key := t
		key.Store = nil
		if j.checks(t) && !held[key] {
			results[i], lost = &journal.FencedError{PersistenceID: writes[i].PersistenceID, Token: t}, true
			continue
		}
		left = append(left, i)
	}
	return left, lost, nil
}
