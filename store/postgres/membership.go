package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
)

// membersDDL and leasesDDL are the membership tables, on both layouts:
// Annals' layout creates them in schema version 4, the r2dbc layout when
// they are missing (tables of Annals' own, which JVM services ignore).
// Names sort in byte order (COLLATE "C"), as Go compares strings, so the
// primary keys serve the reads' order by name. A free lease has the empty
// owner (names are never empty).
const (
	membersDDL = `CREATE TABLE IF NOT EXISTS {s}.cluster_members (
	cluster     TEXT COLLATE "C" NOT NULL,
	name        TEXT COLLATE "C" NOT NULL,
	incarnation TEXT             NOT NULL,
	address     TEXT             NOT NULL,
	joined      TIMESTAMPTZ      NOT NULL, -- the server's time of the incarnation's first join
	expires     TIMESTAMPTZ      NOT NULL, -- the server's time at which the membership ends unless renewed
	PRIMARY KEY (cluster, name)
)`
	leasesDDL = `CREATE TABLE IF NOT EXISTS {s}.cluster_leases (
	cluster           TEXT COLLATE "C" NOT NULL,
	name              TEXT COLLATE "C" NOT NULL,
	owner_name        TEXT             NOT NULL, -- '' when free
	owner_incarnation TEXT             NOT NULL, -- '' when free
	epoch             BIGINT           NOT NULL, -- +1 on every change of owner
	expires           TIMESTAMPTZ      NOT NULL, -- the server's time at which the lease ends unless renewed (free: when it was released)
	PRIMARY KEY (cluster, name)
)`
	// leasesEpochDDL makes epoch a key column of cluster_leases: a write's
	// lease check (fence.go) locks the lease's row FOR KEY SHARE, which
	// only an update of a key column waits for. A take-over raises the
	// epoch and so waits for the writes in flight under the old one; a
	// heartbeat does not.
	leasesEpochDDL = `CREATE UNIQUE INDEX IF NOT EXISTS cluster_leases_epoch_idx ON {s}.cluster_leases (cluster, name, epoch)`
)

// Membership is the store's membership.Store, in the tables
// cluster_members and cluster_leases of the store's schema (both layouts;
// created by Migrate). Processes that share the schema share the clusters.
//
// Rules, beyond those of membership.Store:
//   - Time is the server's: every operation is one transaction, and its
//     times (a new Expires, the expiry it checks, Live) are the
//     transaction's now(), so the clocks of the members never matter.
//     Times are kept to the microsecond; a ttl counts whole milliseconds.
//   - Join and Acquire are each one INSERT … ON CONFLICT DO UPDATE whose
//     WHERE holds only when the call may take the row (free, expired, or
//     the caller's), so concurrent callers from any process are ordered by
//     the row's lock and exactly one of them takes a free lease. The
//     refusal reads the row in the same transaction, under that lock, to
//     name the holder.
//   - Heartbeat is one statement: the member's row is renewed, and only
//     when it was, the leases the member holds, all to one Expires; the
//     leases come back ordered by name.
//   - Release and Leave free a lease by clearing its owner, keeping its
//     epoch; its Expires becomes the time of the release.
//   - The tables must exist: Migrate creates them on both layouts. Calls
//     on a schema without them fail with an error wrapping
//     ErrSchemaMissing.
//   - Errors of the server go through the store's error rule
//     (journal.StoreErrors): a cancelled ctx gives its error, a closed
//     store journal.ErrClosed. Arguments are checked first (ErrInvalid).
type Membership struct {
	s                                         *Store
	join, joinHolder, heartbeat, leave        string
	acquire, acquireNew, leaseHolder, release string
	readMembers, readLeases                   string
	checkHeld                                 string
}

var _ membership.TxChecker[pgx.Tx] = (*Membership)(nil)

// CheckHeldTx implements membership.TxChecker in a transaction of the
// store's database (a projection's, from Projections().InTx): the lease's
// row is read FOR SHARE, so a member acquiring it waits until tx ends.
func (m *Membership) CheckHeldTx(ctx context.Context, tx pgx.Tx, cluster, lease string, h membership.Holder, epoch int64) error {
	if err := membership.CheckLease(lease); err != nil {
		return err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	var held bool
	err := tx.QueryRow(ctx, m.checkHeld, cluster, lease, h.Name, h.Incarnation, epoch).Scan(&held)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s by %s (incarnation %s) at epoch %d", membership.ErrNotHeld, lease, h.Name, h.Incarnation, epoch)
	}
	if err != nil {
		return m.fail(ctx, "check lease", err)
	}
	return nil
}

// Membership returns the store's membership store. Its tables must exist:
// Migrate creates them on both layouts.
func (s *Store) Membership() *Membership {
	members, leases := table(s.cfg.schema, "cluster_members"), table(s.cfg.schema, "cluster_leases")
	// $n::bigint * interval '1 millisecond': a ttl passed in milliseconds.
	return &Membership{s: s,
		join: `INSERT INTO ` + members + ` AS m (cluster, name, incarnation, address, joined, expires)
			VALUES ($1, $2, $3, $4, now(), now() + $5::bigint * interval '1 millisecond')
			ON CONFLICT (cluster, name) DO UPDATE SET incarnation = excluded.incarnation, address = excluded.address,
				joined = CASE WHEN m.incarnation = excluded.incarnation THEN m.joined ELSE excluded.joined END,
				expires = excluded.expires
			WHERE m.incarnation = excluded.incarnation OR m.expires <= now()
			RETURNING true`,
		joinHolder: `SELECT incarnation, address, expires FROM ` + members + ` WHERE cluster = $1 AND name = $2`,
		heartbeat: `WITH m AS (
				UPDATE ` + members + ` SET expires = now() + $4::bigint * interval '1 millisecond'
				WHERE cluster = $1 AND name = $2 AND incarnation = $3
				RETURNING expires
			), l AS (
				UPDATE ` + leases + ` SET expires = now() + $4::bigint * interval '1 millisecond'
				WHERE cluster = $1 AND owner_name = $2 AND owner_incarnation = $3 AND EXISTS (SELECT FROM m)
				RETURNING name, epoch, expires
			)
			SELECT l.name, l.epoch, l.expires FROM m LEFT JOIN l ON true ORDER BY l.name`,
		leave: `WITH l AS (
				UPDATE ` + leases + ` SET owner_name = '', owner_incarnation = '', expires = now()
				WHERE cluster = $1 AND owner_name = $2 AND owner_incarnation = $3
			)
			DELETE FROM ` + members + ` WHERE cluster = $1 AND name = $2 AND incarnation = $3`,
		// An UPDATE, not an upsert: an upsert locks the row it meets before
		// it reads its WHERE, and with the epoch a key column (the
		// fencing index) that lock waits for every write of the holder in
		// flight, also when the lease is not free. The UPDATE locks only a
		// row it takes: a take-over (a new epoch) waits for the writes
		// committing under the old one, the holder's own acquire (the same
		// epoch) and a refused one never wait. The INSERT makes the first
		// row, and does nothing when another made it first.
		acquire: `UPDATE ` + leases + ` AS l SET owner_name = $3, owner_incarnation = $4,
				epoch = l.epoch + CASE WHEN l.owner_name = $3 AND l.owner_incarnation = $4 THEN 0 ELSE 1 END,
				expires = now() + $5::bigint * interval '1 millisecond'
			WHERE l.cluster = $1 AND l.name = $2
				AND (l.owner_name = '' OR l.expires <= now() OR (l.owner_name = $3 AND l.owner_incarnation = $4))
			RETURNING epoch, expires`,
		acquireNew: `INSERT INTO ` + leases + ` (cluster, name, owner_name, owner_incarnation, epoch, expires)
			VALUES ($1, $2, $3, $4, 1, now() + $5::bigint * interval '1 millisecond')
			ON CONFLICT DO NOTHING
			RETURNING epoch, expires`,
		leaseHolder: `SELECT owner_name, owner_incarnation, expires FROM ` + leases + ` WHERE cluster = $1 AND name = $2`,
		release: `UPDATE ` + leases + ` SET owner_name = '', owner_incarnation = '', expires = now()
			WHERE cluster = $1 AND name = $2 AND owner_name = $3 AND owner_incarnation = $4`,
		readMembers: `SELECT name, incarnation, address, joined, expires, expires > now() FROM ` + members + `
			WHERE cluster = $1 ORDER BY name`,
		checkHeld: `SELECT true FROM ` + leases + `
			WHERE cluster = $1 AND name = $2 AND owner_name = $3 AND owner_incarnation = $4 AND epoch = $5 FOR SHARE`,
		readLeases: `SELECT name, owner_name, owner_incarnation, epoch, expires, owner_name <> '' AND expires > now() FROM ` + leases + `
			WHERE cluster = $1 ORDER BY name`,
	}
}

// fail maps an error of the server of operation op: a missing table is
// ErrSchemaMissing, then the store's rules (journal.StoreErrors) apply
// with journal.ErrClosed.
func (m *Membership) fail(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		err = fmt.Errorf("%w: schema %q has no membership tables; create them with Store.Migrate or `annals migrate --store URL`: %w", ErrSchemaMissing, m.s.cfg.schema, err)
	}
	return m.s.errs.Map(ctx, "membership "+op, err, journal.ErrClosed)
}

// takeOrHolder sends, in one implicit transaction (one round trip), the
// statements takes, each of whose RETURNING row means success, and then
// holder: it runs after them, so it reads the row that refused the call.
// took reports that one of takes returned its row (read into taken);
// otherwise the holder's row was read into refused (found false when it
// is gone). Every statement gets args; holder its first two.
func (m *Membership) takeOrHolder(ctx context.Context, takes []string, args []any, taken []any, holder string, refused []any) (took, found bool, err error) {
	b := &pgx.Batch{}
	for _, q := range takes {
		b.Queue(q, args...)
	}
	b.Queue(holder, args[0], args[1])
	br := m.s.pool.SendBatch(ctx, b)
	defer br.Close()
	for range takes {
		switch err := br.QueryRow().Scan(taken...); {
		case err == nil:
			return true, false, br.Close()
		case !errors.Is(err, pgx.ErrNoRows):
			return false, false, err
		}
	}
	switch err := br.QueryRow().Scan(refused...); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, br.Close()
	case err != nil:
		return false, false, err
	}
	return false, true, br.Close()
}

// Join implements membership.Store.
func (m *Membership) Join(ctx context.Context, cluster string, mem membership.Member, ttl time.Duration) error {
	if err := membership.CheckHolder(cluster, mem.Holder()); err != nil {
		return err
	}
	if err := membership.CheckTTL(ttl); err != nil {
		return err
	}
	var ok bool
	var inc, addr string
	var expires time.Time
	took, found, err := m.takeOrHolder(ctx, []string{m.join}, []any{cluster, mem.Name, mem.Incarnation, mem.Address, ttl.Milliseconds()},
		[]any{&ok}, m.joinHolder, []any{&inc, &addr, &expires})
	switch {
	case err != nil:
		return m.fail(ctx, "join", err)
	case took:
		return nil
	case found:
		return fmt.Errorf("%w: %q (incarnation %s at %s, until %s)", membership.ErrNameTaken, mem.Name, inc, addr, expires.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Errorf("%w: %q", membership.ErrNameTaken, mem.Name)
}

// Heartbeat implements membership.Store.
func (m *Membership) Heartbeat(ctx context.Context, cluster string, h membership.Holder, ttl time.Duration) ([]membership.Lease, error) {
	if err := membership.CheckHolder(cluster, h); err != nil {
		return nil, err
	}
	if err := membership.CheckTTL(ttl); err != nil {
		return nil, err
	}
	rows, err := m.s.pool.Query(ctx, m.heartbeat, cluster, h.Name, h.Incarnation, ttl.Milliseconds())
	if err != nil {
		return nil, m.fail(ctx, "heartbeat", err)
	}
	member := false
	var renewed []membership.Lease
	for rows.Next() {
		member = true
		var name *string
		var epoch *int64
		var expires *time.Time
		if err := rows.Scan(&name, &epoch, &expires); err != nil {
			rows.Close()
			return nil, m.fail(ctx, "heartbeat", err)
		}
		if name != nil { // nil: the member's row, with no lease
			renewed = append(renewed, membership.Lease{Name: *name, Owner: h, Epoch: *epoch, Expires: *expires, Live: true})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, m.fail(ctx, "heartbeat", err)
	}
	if !member {
		return nil, fmt.Errorf("%w: %s (incarnation %s)", membership.ErrNotMember, h.Name, h.Incarnation)
	}
	return renewed, nil
}

// Leave implements membership.Store.
func (m *Membership) Leave(ctx context.Context, cluster string, h membership.Holder) error {
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	if _, err := m.s.pool.Exec(ctx, m.leave, cluster, h.Name, h.Incarnation); err != nil {
		return m.fail(ctx, "leave", err)
	}
	return nil
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
	l := membership.Lease{Name: lease, Owner: h, Live: true}
	var owner membership.Holder
	var until time.Time
	args := []any{cluster, lease, h.Name, h.Incarnation, ttl.Milliseconds()}
	// The UPDATE takes an existing row, the INSERT a first one.
	took, found, err := m.takeOrHolder(ctx, []string{m.acquire, m.acquireNew}, args, []any{&l.Epoch, &l.Expires}, m.leaseHolder, []any{&owner.Name, &owner.Incarnation, &until})
	switch {
	case err != nil:
		return membership.Lease{}, m.fail(ctx, "acquire", err)
	case took:
		return l, nil
	case found:
		return membership.Lease{}, fmt.Errorf("%w: %s by %s (incarnation %s) until %s", membership.ErrHeld, lease, owner.Name, owner.Incarnation, until.UTC().Format(time.RFC3339Nano))
	}
	return membership.Lease{}, fmt.Errorf("%w: %s", membership.ErrHeld, lease)
}

// Release implements membership.Store.
func (m *Membership) Release(ctx context.Context, cluster, lease string, h membership.Holder) error {
	if err := membership.CheckLease(lease); err != nil {
		return err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	if _, err := m.s.pool.Exec(ctx, m.release, cluster, lease, h.Name, h.Incarnation); err != nil {
		return m.fail(ctx, "release", err)
	}
	return nil
}

// Members implements membership.Store.
func (m *Membership) Members(ctx context.Context, cluster string) ([]membership.Member, error) {
	rows, err := m.s.pool.Query(ctx, m.readMembers, cluster)
	if err != nil {
		return nil, m.fail(ctx, "members", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (membership.Member, error) {
		var mem membership.Member
		err := r.Scan(&mem.Name, &mem.Incarnation, &mem.Address, &mem.Joined, &mem.Expires, &mem.Live)
		return mem, err
	})
	if err != nil {
		return nil, m.fail(ctx, "members", err)
	}
	return out, nil
}

// Leases implements membership.Store.
func (m *Membership) Leases(ctx context.Context, cluster string) ([]membership.Lease, error) {
	rows, err := m.s.pool.Query(ctx, m.readLeases, cluster)
	if err != nil {
		return nil, m.fail(ctx, "leases", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (membership.Lease, error) {
		var l membership.Lease
		err := r.Scan(&l.Name, &l.Owner.Name, &l.Owner.Incarnation, &l.Epoch, &l.Expires, &l.Live)
		return l, err
	})
	if err != nil {
		return nil, m.fail(ctx, "leases", err)
	}
	return out, nil
}
