package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
)

// Membership is the store's membership.Store, in the tables
// cluster_members and cluster_leases of the file: the clusters of the
// processes on one machine that share the file.
//
// Rules, beyond those of membership.Store:
//   - Every change is one write transaction (BEGIN IMMEDIATE on the
//     store's writer connection): SQLite's write lock orders it against
//     every other change of the file, from this process or another, so
//     exactly one of the members racing for a free lease takes it.
//     Waiting for the lock is bounded by WithBusyTimeout.
//   - Time is the machine's clock, which the processes sharing the file
//     share: a change reads it once, after it took the write lock, and
//     uses it for the expiry it checks and the Expires it writes; a read
//     computes Live with the clock at the read. Times are kept as Unix
//     milliseconds; a ttl counts whole milliseconds.
//   - Join and Acquire are each one INSERT … ON CONFLICT DO UPDATE whose
//     WHERE holds only when the call may take the row (free, expired, or
//     the caller's); a refusal reads the row, in the same transaction, to
//     name the holder.
//   - Heartbeat renews the member's row and then, when it was renewed,
//     the leases the member holds, to one Expires; the leases come back
//     ordered by name.
//   - Release and Leave free a lease by clearing its owner, keeping its
//     epoch; its Expires becomes the time of the release.
//   - Arguments are checked first (ErrInvalid); errors of the driver go
//     through the store's error rule (journal.StoreErrors): a cancelled
//     ctx gives its error, a closed store journal.ErrClosed.
type Membership struct{ s *Store }

var _ membership.TxChecker[*sql.Tx] = (*Membership)(nil)

// CheckHeldTx implements membership.TxChecker in a transaction of the
// store's file (a projection's, from Projections().InTx, which holds the
// file's write lock: no member can take the lease until it ends).
func (m *Membership) CheckHeldTx(ctx context.Context, tx *sql.Tx, cluster, lease string, h membership.Holder, epoch int64) error {
	if err := membership.CheckLease(lease); err != nil {
		return err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	var one int
	err := tx.QueryRowContext(ctx, checkHeldSQL, cluster, lease, h.Name, h.Incarnation, epoch).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s by %s (incarnation %s) at epoch %d", membership.ErrNotHeld, lease, h.Name, h.Incarnation, epoch)
	}
	if err != nil {
		return m.fail(ctx, "check lease", err)
	}
	return nil
}

// Membership returns the store's membership store.
func (s *Store) Membership() *Membership { return &Membership{s: s} }

const (
	joinSQL = `INSERT INTO cluster_members (cluster, name, incarnation, address, joined, expires) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
		ON CONFLICT (cluster, name) DO UPDATE SET incarnation = excluded.incarnation, address = excluded.address,
			joined = CASE WHEN cluster_members.incarnation = excluded.incarnation THEN cluster_members.joined ELSE excluded.joined END,
			expires = excluded.expires
		WHERE cluster_members.incarnation = excluded.incarnation OR cluster_members.expires <= ?5
		RETURNING 1`
	memberSQL     = `SELECT incarnation, address, expires FROM cluster_members WHERE cluster = ? AND name = ?`
	renewSQL      = `UPDATE cluster_members SET expires = ?4 WHERE cluster = ?1 AND name = ?2 AND incarnation = ?3`
	renewOwnSQL   = `UPDATE cluster_leases SET expires = ?4 WHERE cluster = ?1 AND owner_name = ?2 AND owner_incarnation = ?3 RETURNING name, epoch`
	releaseAllSQL = `UPDATE cluster_leases SET owner_name = '', owner_incarnation = '', expires = ?4
		WHERE cluster = ?1 AND owner_name = ?2 AND owner_incarnation = ?3`
	removeSQL  = `DELETE FROM cluster_members WHERE cluster = ? AND name = ? AND incarnation = ?`
	acquireSQL = `INSERT INTO cluster_leases (cluster, name, owner_name, owner_incarnation, epoch, expires) VALUES (?1, ?2, ?3, ?4, 1, ?6)
		ON CONFLICT (cluster, name) DO UPDATE SET owner_name = excluded.owner_name, owner_incarnation = excluded.owner_incarnation,
			epoch = cluster_leases.epoch + (cluster_leases.owner_name <> excluded.owner_name OR cluster_leases.owner_incarnation <> excluded.owner_incarnation),
			expires = excluded.expires
		WHERE cluster_leases.owner_name = '' OR cluster_leases.expires <= ?5
			OR (cluster_leases.owner_name = excluded.owner_name AND cluster_leases.owner_incarnation = excluded.owner_incarnation)
		RETURNING epoch`
	checkHeldSQL = `SELECT 1 FROM cluster_leases WHERE cluster = ? AND name = ? AND owner_name = ? AND owner_incarnation = ? AND epoch = ?`
	leaseSQL     = `SELECT owner_name, owner_incarnation, expires FROM cluster_leases WHERE cluster = ? AND name = ?`
	releaseSQL   = `UPDATE cluster_leases SET owner_name = '', owner_incarnation = '', expires = ?5
		WHERE cluster = ?1 AND name = ?2 AND owner_name = ?3 AND owner_incarnation = ?4`
	membersSQL = `SELECT name, incarnation, address, joined, expires FROM cluster_members WHERE cluster = ? ORDER BY name`
	leasesSQL  = `SELECT name, owner_name, owner_incarnation, epoch, expires FROM cluster_leases WHERE cluster = ? ORDER BY name`
)

// millis returns the time of Unix milliseconds ms, in UTC.
func millis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// refusal reports the contract's refusals, which a change returns as they
// are (its transaction rolled back); other errors are the driver's.
func refusal(err error) bool {
	return errors.Is(err, membership.ErrNameTaken) || errors.Is(err, membership.ErrNotMember) || errors.Is(err, membership.ErrHeld)
}

// change runs fn in a write transaction with the machine's time, in Unix
// milliseconds, read after the write lock was taken, and commits it
// unless fn failed.
func (m *Membership) change(ctx context.Context, op string, fn func(tx *sql.Tx, now int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.s.isClosed() {
		return journal.ErrClosed
	}
	tx, release, err := m.s.writeTxn(ctx)
	if err != nil {
		return m.fail(ctx, op, err)
	}
	defer release()
	if err := fn(tx, time.Now().UnixMilli()); err != nil {
		if refusal(err) {
			return err
		}
		return m.fail(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return m.fail(ctx, op, err)
	}
	return nil
}

// fail maps an error of the driver through the store's error rule.
func (m *Membership) fail(ctx context.Context, op string, err error) error {
	return m.s.errs.Map(ctx, "membership "+op, err, journal.ErrClosed)
}

// Join implements membership.Store.
func (m *Membership) Join(ctx context.Context, cluster string, mem membership.Member, ttl time.Duration) error {
	if err := membership.CheckHolder(cluster, mem.Holder()); err != nil {
		return err
	}
	if err := membership.CheckTTL(ttl); err != nil {
		return err
	}
	return m.change(ctx, "join", func(tx *sql.Tx, now int64) error {
		var one int
		err := tx.QueryRow(joinSQL, cluster, mem.Name, mem.Incarnation, mem.Address, now, now+ttl.Milliseconds()).Scan(&one)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var inc, addr string
		var expires int64
		if err := tx.QueryRow(memberSQL, cluster, mem.Name).Scan(&inc, &addr, &expires); err != nil {
			return err
		}
		return fmt.Errorf("%w: %q (incarnation %s at %s, until %s)", membership.ErrNameTaken, mem.Name, inc, addr, millis(expires).Format(time.RFC3339Nano))
	})
}

// Heartbeat implements membership.Store.
func (m *Membership) Heartbeat(ctx context.Context, cluster string, h membership.Holder, ttl time.Duration) ([]membership.Lease, error) {
	if err := membership.CheckHolder(cluster, h); err != nil {
		return nil, err
	}
	if err := membership.CheckTTL(ttl); err != nil {
		return nil, err
	}
	var renewed []membership.Lease
	err := m.change(ctx, "heartbeat", func(tx *sql.Tx, now int64) error {
		renewed = nil
		expires := now + ttl.Milliseconds()
		res, err := tx.Exec(renewSQL, cluster, h.Name, h.Incarnation, expires)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%w: %s (incarnation %s)", membership.ErrNotMember, h.Name, h.Incarnation)
		}
		rows, err := tx.Query(renewOwnSQL, cluster, h.Name, h.Incarnation, expires)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			l := membership.Lease{Owner: h, Expires: millis(expires), Live: true}
			if err := rows.Scan(&l.Name, &l.Epoch); err != nil {
				return err
			}
			renewed = append(renewed, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(renewed, func(a, b membership.Lease) int { return cmp.Compare(a.Name, b.Name) })
	return renewed, nil
}

// Leave implements membership.Store.
func (m *Membership) Leave(ctx context.Context, cluster string, h membership.Holder) error {
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	return m.change(ctx, "leave", func(tx *sql.Tx, now int64) error {
		if _, err := tx.Exec(releaseAllSQL, cluster, h.Name, h.Incarnation, now); err != nil {
			return err
		}
		_, err := tx.Exec(removeSQL, cluster, h.Name, h.Incarnation)
		return err
	})
}

// Acquire implements membership.Store.
func (m *Membership) Acquire(ctx context.Context, cluster, lease string, h membership.Holder, ttl time.Duration) (membership.Lease, error) {
	if err := membership.CheckLease(lease); err != nil {
		return membership.Lease{}, err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return membership.Lease{}, err
	}
	if err := membership.CheckTTL(ttl); err != nil {
		return membership.Lease{}, err
	}
	var l membership.Lease
	err := m.change(ctx, "acquire", func(tx *sql.Tx, now int64) error {
		expires := now + ttl.Milliseconds()
		l = membership.Lease{Name: lease, Owner: h, Expires: millis(expires), Live: true}
		err := tx.QueryRow(acquireSQL, cluster, lease, h.Name, h.Incarnation, now, expires).Scan(&l.Epoch)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var owner membership.Holder
		var until int64
		if err := tx.QueryRow(leaseSQL, cluster, lease).Scan(&owner.Name, &owner.Incarnation, &until); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s by %s (incarnation %s) until %s", membership.ErrHeld, lease, owner.Name, owner.Incarnation, millis(until).Format(time.RFC3339Nano))
	})
	if err != nil {
		return membership.Lease{}, err
	}
	return l, nil
}

// Release implements membership.Store.
func (m *Membership) Release(ctx context.Context, cluster, lease string, h membership.Holder) error {
	if err := membership.CheckLease(lease); err != nil {
		return err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	return m.change(ctx, "release", func(tx *sql.Tx, now int64) error {
		_, err := tx.Exec(releaseSQL, cluster, lease, h.Name, h.Incarnation, now)
		return err
	})
}

// read runs the query text of one cluster's records on a reader
// connection, calling row for each, with the machine's time in Unix
// milliseconds read before the query.
func (m *Membership) read(ctx context.Context, op, text, cluster string, row func(rows *sql.Rows, now int64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.s.isClosed() {
		return journal.ErrClosed
	}
	now := time.Now().UnixMilli()
	rows, err := m.s.reader.QueryContext(ctx, text, cluster)
	if err != nil {
		return m.fail(ctx, op, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows, now); err != nil {
			return m.fail(ctx, op, err)
		}
	}
	if err := rows.Err(); err != nil {
		return m.fail(ctx, op, err)
	}
	return nil
}

// Members implements membership.Store.
func (m *Membership) Members(ctx context.Context, cluster string) ([]membership.Member, error) {
	var out []membership.Member
	err := m.read(ctx, "members", membersSQL, cluster, func(rows *sql.Rows, now int64) error {
		var mem membership.Member
		var joined, expires int64
		if err := rows.Scan(&mem.Name, &mem.Incarnation, &mem.Address, &joined, &expires); err != nil {
			return err
		}
		mem.Joined, mem.Expires, mem.Live = millis(joined), millis(expires), now < expires
		out = append(out, mem)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Leases implements membership.Store.
func (m *Membership) Leases(ctx context.Context, cluster string) ([]membership.Lease, error) {
	var out []membership.Lease
	err := m.read(ctx, "leases", leasesSQL, cluster, func(rows *sql.Rows, now int64) error {
		var l membership.Lease
		var expires int64
		if err := rows.Scan(&l.Name, &l.Owner.Name, &l.Owner.Incarnation, &l.Epoch, &expires); err != nil {
			return err
		}
		l.Expires, l.Live = millis(expires), l.Owner.Name != "" && now < expires
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
