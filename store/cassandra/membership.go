package cassandra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
)

// membershipTable is the membership store's table, one of optionalTables.
const membershipTable = "cluster_membership"

// The kinds of rows of membershipTable: a cluster's members and its leases
// share its partition.
const (
	kindMember = "member"
	kindLease  = "lease"
)

// maxTTLSeconds is the longest TTL Cassandra takes (20 years).
const maxTTLSeconds = 630_720_000

// membershipAttempts bounds the transactions one call runs: a call whose
// transaction is not applied (the rows changed since it read them) or
// whose outcome Cassandra could not tell reads again and decides again,
// at most this many times.
const membershipAttempts = 10

// Membership returns the store's membership store, on the
// cluster_membership table of the keyspace. Migrate creates the table;
// Open does not require it.
func (s *Store) Membership() *Membership {
	t := s.cfg.keyspace + "." + membershipTable
	const cols = `kind, name, incarnation, address, joined, owner_name, owner_incarnation, epoch, live, term, WRITETIME(term)`
	const member = ` WHERE cluster = ? AND kind = '` + kindMember + `' AND name = ?`
	const lease = ` WHERE cluster = ? AND kind = '` + kindLease + `' AND name = ?`
	return &Membership{s: s,
		readCluster: `SELECT ` + cols + ` FROM ` + t + ` WHERE cluster = ?`,
		readKind:    `SELECT ` + cols + ` FROM ` + t + ` WHERE cluster = ? AND kind = ?`,
		readRow:     `SELECT ` + cols + ` FROM ` + t + ` WHERE cluster = ? AND kind = ? AND name = ?`,
		joinNew: `UPDATE ` + t + ` USING TTL ? SET incarnation = ?, address = ?, joined = currentTimestamp(), term = ?, live = true` +
			member + ` IF incarnation = null`,
		renewMember: `UPDATE ` + t + ` USING TTL ? SET incarnation = ?, address = ?, joined = ?, term = ?, live = true` +
			member + ` IF incarnation = ? AND address = ? AND joined = ?`,
		dropMember: `DELETE FROM ` + t + member + ` IF incarnation = ?`,
		takeLease: `UPDATE ` + t + ` SET epoch = ?, owner_name = ?, owner_incarnation = ?, term = ?` +
			lease + ` IF epoch = ? AND owner_name = ? AND owner_incarnation = ? AND live = ?`,
		renewLease:   `UPDATE ` + t + ` SET term = ?` + lease + ` IF owner_name = ? AND owner_incarnation = ? AND epoch = ?`,
		leaseLive:    `UPDATE ` + t + ` USING TTL ? SET live = true` + lease,
		releaseLease: `UPDATE ` + t + ` SET owner_name = null, owner_incarnation = null, term = null, live = null` + lease + ` IF owner_name = ? AND owner_incarnation = ?`,
	}
}

// Membership is the membership.Store of a Store, in a table of Annals' own
// (Pekko has none), one partition per cluster:
//
//	CREATE TABLE cluster_membership (cluster text, kind text, name text,
//	  incarnation text, address text, joined timestamp,   -- kind 'member'
//	  owner_name text, owner_incarnation text, epoch bigint, -- kind 'lease'
//	  live boolean, term int,
//	  PRIMARY KEY ((cluster), kind, name))
//
// The rules, besides membership.Store's:
//
//   - Time is the server's, through TTLs: a member's row and a lease's live
//     column are written USING TTL, and a term has passed when Cassandra
//     no longer returns them; no condition or decision compares times, and
//     no member's clock is read. Cassandra counts a TTL in whole seconds
//     from the second (rounded down) in which the statement reached the
//     coordinator, so a ttl is written as its whole seconds rounded up,
//     plus one: a term lasts at least ttl from the call's arrival and less
//     than ttl + 2 s. term holds those seconds. A ttl above Cassandra's
//     largest TTL (20 years) fails with membership.ErrInvalid.
//   - A member is one row of kind 'member', every column written with the
//     term's TTL (Join and Heartbeat rewrite them all): when the term
//     passes, the row is gone. Members lists live members only (an expired
//     one is not listed, as if it had left), Heartbeat of a member whose
//     term passed fails with ErrNotMember, and its name is free. Joined is
//     the server's time (currentTimestamp()) of the incarnation's first
//     Join, kept by later ones.
//   - A lease is one row of kind 'lease' whose epoch, owner and term are
//     written without TTL and whose live column with the term's TTL: an
//     expired lease keeps its epoch and names its owner (Live false) until
//     another takes it, so every new owner's epoch is the last one's + 1.
//     Release and Leave set the owner, term and live to null, epoch kept.
//   - Expires is read, never computed from a member's clock: WRITETIME of
//     term (the Paxos ballot's time, on the coordinator's clock) rounded
//     down to the second, plus term. It is when Cassandra drops the TTL'd
//     cells, and Live (their presence) agrees with it to the second,
//     except after a Paxos round that crossed into a later second than
//     the statement began in (contention): the TTL then ends that much
//     before Expires. A released lease has a zero Expires.
//   - Every change is one lightweight transaction on the cluster's
//     partition, at the store's write consistency with LOCAL_SERIAL, as
//     the journal's writes are; Paxos orders them against every other
//     call from any process. A call reads the rows it decides on at the
//     store's read consistency, then runs a transaction whose condition
//     is what it read; when that is not applied (the rows changed in
//     between), or Cassandra could not tell its outcome (a write timeout
//     of the CAS type, as contention on the partition can cause), the
//     call reads again and decides again, up to ten times; then it fails.
//     Each call's effect is the same whether an unknown transaction was
//     applied or not (taking one's own lease renews it, joining as one's
//     own incarnation renews the row, releasing what one no longer holds
//     changes nothing). Reads at the read consistency see every write that
//     returned when read and write consistencies overlap (the defaults);
//     refusals (ErrNameTaken, ErrHeld, ErrNotMember) are decided on them,
//     or on the answer of a transaction not applied (the row as Paxos
//     read it).
//   - Join: UPDATE … IF incarnation = null for a free name, UPDATE … IF
//     incarnation = ? AND address = ? AND joined = ? (the row as read) for
//     the member's own incarnation; a row of another incarnation is live,
//     and refuses the call with ErrNameTaken.
//   - Acquire is one conditional batch on the lease's row, whose condition
//     is the row as read (epoch, owner, live): the epoch and owner without
//     TTL, live with it. A live lease of another member refuses it with
//     ErrHeld; of concurrent Acquires of a free lease, Paxos applies one,
//     and the others' transactions return the winner's row, which refuses
//     them.
//   - Heartbeat is one conditional batch on the cluster's partition: the
//     member's row (IF incarnation, address and joined are as read) and,
//     for each lease the member holds, expired or not, its term (IF its
//     owner and epoch are as read) and its live column. Either all are
//     renewed, or none and the call reads again. A batch is limited by
//     the cluster's batch_size_fail_threshold (50 KiB by default): a
//     member can hold some hundreds of leases.
//   - Leave is one conditional batch: each lease the member holds released
//     (IF its owner is the member) and its row deleted (IF its incarnation
//     is the member's). Release is one UPDATE … IF owner_name = ? AND
//     owner_incarnation = ?: not applied, it is the contract's no-op.
//   - Acquire and Heartbeat read the rows back after their transaction (at
//     the read consistency), for Expires: they return the leases as that
//     read finds them (Acquire: the lease as stored; Heartbeat: the renewed
//     leases the member still holds, ordered by name).
//   - Members and Leases read the cluster's partition at the store's read
//     consistency, ordered by name (Cassandra compares text as bytes, as
//     Go compares strings). An empty cluster name fails with
//     membership.ErrInvalid (Cassandra refuses an empty partition key).
//   - Open does not require the table (keyspaces of earlier Annals
//     versions and of Pekko services open without it); Migrate creates
//     it. Calls on a keyspace without it fail with an error wrapping
//     ErrSchemaMissing.
//
// Errors are mapped as the store's others are (journal.StoreErrors), with
// journal.ErrClosed as the closed error; arguments are checked first
// (membership.ErrInvalid), then ctx, then whether the store is closed.
// The store's WithClock does not apply: the server keeps the time.
type Membership struct {
	s                                *Store
	readCluster, readKind, readRow   string
	joinNew, renewMember, dropMember string
	takeLease, renewLease, leaseLive string
	releaseLease                     string
}

var _ membership.Store = (*Membership)(nil)

// membershipRow is a row of the membership table as read.
type membershipRow struct {
	kind, name           string
	incarnation, address string    // members
	joined               time.Time // members
	owner                membership.Holder
	epoch                int64 // leases; 0 for none
	live                 bool  // the TTL'd column is there: the term has not passed
	term                 int   // the TTL's seconds; 0 for none
	written              int64 // WRITETIME(term), microseconds; 0 for none
}

// expires is the row's Expires: the second of its term's write plus the
// term, zero when it has none.
func (r membershipRow) expires() time.Time {
	if r.written <= 0 || r.term <= 0 {
		return time.Time{}
	}
	return time.Unix(r.written/1_000_000+int64(r.term), 0).UTC()
}

func (r membershipRow) member() membership.Member {
	return membership.Member{Name: r.name, Incarnation: r.incarnation, Address: r.address,
		Joined: utcOrZero(r.joined), Expires: r.expires(), Live: r.live}
}

func (r membershipRow) lease() membership.Lease {
	return membership.Lease{Name: r.name, Owner: r.owner, Epoch: r.epoch, Expires: r.expires(),
		Live: r.live && r.owner != (membership.Holder{})}
}

// ttlSeconds returns the TTL a term of ttl is written with: its whole
// seconds rounded up, plus one (see Membership).
func ttlSeconds(ttl time.Duration) (int, error) {
	if err := membership.CheckTTL(ttl); err != nil {
		return 0, err
	}
	secs := (ttl + time.Second - 1) / time.Second
	if secs+1 > maxTTLSeconds {
		return 0, fmt.Errorf("%w: lease time %v is above Cassandra's largest TTL of %d s", membership.ErrInvalid, ttl, maxTTLSeconds)
	}
	return int(secs) + 1, nil
}

// nullable binds "" and 0 as null: names are never empty and epochs start
// at 1, so a row's absent values read as the zero ones.
func nullable[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// ready checks the context and the store, after the caller checked its
// arguments.
func (m *Membership) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.s.isClosed() {
		return journal.ErrClosed
	}
	return nil
}

// fail maps a driver error of operation op: a missing table is
// ErrSchemaMissing, then the store's rules (journal.StoreErrors) apply
// with journal.ErrClosed.
func (m *Membership) fail(ctx context.Context, op string, err error) error {
	var re gocql.RequestError
	if errors.As(err, &re) && re.Code() == gocql.ErrCodeInvalid && missingTable(re.Message(), membershipTable) {
		err = fmt.Errorf("%w: keyspace %s has no %s table; create it with Migrator.Migrate, WithMigrate or `annals migrate --store URL`: %w",
			ErrSchemaMissing, m.s.cfg.keyspace, membershipTable, err)
	}
	return m.s.errs.Map(ctx, "membership "+op, err, journal.ErrClosed)
}

// contended is the error of a call whose transactions were all lost to
// concurrent changes or of unknown outcome; last is the last such outcome.
func contended(last error) error {
	if last != nil {
		return fmt.Errorf("%d transactions not applied, the last of unknown outcome: %w", membershipAttempts, last)
	}
	return fmt.Errorf("%d transactions not applied: the rows changed under each", membershipAttempts)
}

// casUnknown reports a transaction whose outcome Cassandra could not tell.
func casUnknown(err error) bool {
	var timeout *gocql.RequestErrWriteTimeout
	var unknown *gocql.RequestErrCASWriteUnknown
	return (errors.As(err, &timeout) && timeout.WriteType == "CAS") || errors.As(err, &unknown)
}

// read returns the rows stmt selects, in clustering order.
func (m *Membership) read(ctx context.Context, stmt string, args ...any) ([]membershipRow, error) {
	iter := m.s.session.Query(stmt, args...).WithContext(ctx).Consistency(m.s.cfg.readCL).Iter()
	var out []membershipRow
	var r membershipRow
	for iter.Scan(&r.kind, &r.name, &r.incarnation, &r.address, &r.joined, &r.owner.Name, &r.owner.Incarnation,
		&r.epoch, &r.live, &r.term, &r.written) {
		out = append(out, r)
		r = membershipRow{}
	}
	return out, iter.Close()
}

// readOne returns the row of kind and name, if there is one.
func (m *Membership) readOne(ctx context.Context, cluster, kind, name string) (membershipRow, bool, error) {
	rows, err := m.read(ctx, m.readRow, cluster, kind, name)
	if err != nil || len(rows) == 0 {
		return membershipRow{}, false, err
	}
	return rows[0], true, nil
}

// batch returns a conditional batch for ctx at the store's consistencies.
func (m *Membership) batch(ctx context.Context) *gocql.Batch {
	b := m.s.session.Batch(gocql.LoggedBatch).WithContext(ctx)
	b.SetConsistency(m.s.cfg.writeCL)
	b.SerialConsistency(m.s.cfg.serialCL)
	return b
}

// execBatch runs the conditional batch b: whether it was applied, with the
// first row of its answer (the current values of the first condition's
// columns) in answer when it was not. An outcome Cassandra could not tell
// is reported as not applied with unknown set.
func execBatch(b *gocql.Batch, answer map[string]any) (applied bool, unknown, err error) {
	applied, iter, err := b.MapExecCAS(answer)
	if iter != nil {
		if cerr := iter.Close(); err == nil {
			err = cerr
		}
	}
	if casUnknown(err) {
		return false, err, nil
	}
	return applied, nil, err
}

// execQuery runs the lightweight transaction stmt as execBatch runs a
// batch.
func (m *Membership) execQuery(ctx context.Context, stmt string, args ...any) (applied bool, unknown, err error) {
	applied, err = m.s.session.Query(stmt, args...).WithContext(ctx).Consistency(m.s.cfg.writeCL).
		SerialConsistency(m.s.cfg.serialCL).MapScanCAS(map[string]any{})
	if casUnknown(err) {
		return false, err, nil
	}
	return applied, nil, err
}

// Join implements membership.Store: the member's row, written with the
// term's TTL by one lightweight transaction (see Membership).
func (m *Membership) Join(ctx context.Context, cluster string, mem membership.Member, ttl time.Duration) error {
	if err := membership.CheckHolder(cluster, mem.Holder()); err != nil {
		return err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return err
	}
	if err := m.ready(ctx); err != nil {
		return err
	}
	var last error
	for range membershipAttempts {
		r, found, err := m.readOne(ctx, cluster, kindMember, mem.Name)
		if err != nil {
			return m.fail(ctx, "join", err)
		}
		var applied bool
		switch {
		case !found:
			applied, last, err = m.execQuery(ctx, m.joinNew, secs, mem.Incarnation, mem.Address, secs, cluster, mem.Name)
		case r.incarnation == mem.Incarnation:
			applied, last, err = m.execQuery(ctx, m.renewMember, secs, mem.Incarnation, mem.Address, r.joined, secs, cluster, mem.Name,
				r.incarnation, r.address, r.joined)
		default:
			return fmt.Errorf("%w: %q (incarnation %s at %s, until %s)", membership.ErrNameTaken, mem.Name, r.incarnation, r.address,
				r.expires().Format(time.RFC3339))
		}
		if err != nil {
			return m.fail(ctx, "join", err)
		}
		if applied {
			return nil
		}
	}
	return m.fail(ctx, "join", contended(last))
}

// Heartbeat implements membership.Store: the member's row and its leases'
// terms in one conditional batch (see Membership).
func (m *Membership) Heartbeat(ctx context.Context, cluster string, h membership.Holder, ttl time.Duration) ([]membership.Lease, error) {
	if err := membership.CheckHolder(cluster, h); err != nil {
		return nil, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return nil, err
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	var last error
	for range membershipAttempts {
		rows, err := m.read(ctx, m.readCluster, cluster)
		if err != nil {
			return nil, m.fail(ctx, "heartbeat", err)
		}
		i := slices.IndexFunc(rows, func(r membershipRow) bool { return r.kind == kindMember && r.name == h.Name })
		if i < 0 || rows[i].incarnation != h.Incarnation {
			return nil, fmt.Errorf("%w: %s (incarnation %s)", membership.ErrNotMember, h.Name, h.Incarnation)
		}
		me := rows[i]
		b := m.batch(ctx)
		b.Query(m.renewMember, secs, h.Incarnation, me.address, me.joined, secs, cluster, h.Name, me.incarnation, me.address, me.joined)
		renewed := map[string]int64{} // name: epoch
		for _, r := range rows {
			if r.kind == kindLease && r.owner == h {
				b.Query(m.renewLease, secs, cluster, r.name, h.Name, h.Incarnation, r.epoch)
				b.Query(m.leaseLive, secs, cluster, r.name)
				renewed[r.name] = r.epoch
			}
		}
		var applied bool
		applied, last, err = execBatch(b, map[string]any{})
		if err != nil {
			return nil, m.fail(ctx, "heartbeat", err)
		}
		if !applied {
			continue
		}
		if len(renewed) == 0 {
			return nil, nil
		}
		after, err := m.read(ctx, m.readKind, cluster, kindLease)
		if err != nil {
			return nil, m.fail(ctx, "heartbeat", err)
		}
		var out []membership.Lease
		for _, r := range after {
			if epoch, ok := renewed[r.name]; ok && r.owner == h && r.epoch == epoch {
				out = append(out, r.lease())
			}
		}
		return out, nil
	}
	return nil, m.fail(ctx, "heartbeat", contended(last))
}

// Leave implements membership.Store: the member's leases released and its
// row deleted in one conditional batch (see Membership).
func (m *Membership) Leave(ctx context.Context, cluster string, h membership.Holder) error {
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	if err := m.ready(ctx); err != nil {
		return err
	}
	var last error
	for range membershipAttempts {
		rows, err := m.read(ctx, m.readCluster, cluster)
		if err != nil {
			return m.fail(ctx, "leave", err)
		}
		b := m.batch(ctx)
		for _, r := range rows {
			switch {
			case r.kind == kindLease && r.owner == h:
				b.Query(m.releaseLease, cluster, r.name, h.Name, h.Incarnation)
			case r.kind == kindMember && r.name == h.Name && r.incarnation == h.Incarnation:
				b.Query(m.dropMember, cluster, h.Name, h.Incarnation)
			}
		}
		if b.Size() == 0 {
			return nil
		}
		var applied bool
		applied, last, err = execBatch(b, map[string]any{})
		if err != nil {
			return m.fail(ctx, "leave", err)
		}
		if applied {
			return nil
		}
	}
	return m.fail(ctx, "leave", contended(last))
}

// Acquire implements membership.Store: one conditional batch on the
// lease's row (see Membership).
func (m *Membership) Acquire(ctx context.Context, cluster, lease string, h membership.Holder, ttl time.Duration) (membership.Lease, error) {
	if err := membership.CheckLease(lease); err != nil {
		return membership.Lease{}, err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return membership.Lease{}, err
	}
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return membership.Lease{}, err
	}
	if err := m.ready(ctx); err != nil {
		return membership.Lease{}, err
	}
	r, _, err := m.readOne(ctx, cluster, kindLease, lease)
	if err != nil {
		return membership.Lease{}, m.fail(ctx, "acquire", err)
	}
	var last error
	for range membershipAttempts {
		epoch := r.epoch
		if r.owner != h {
			if r.live && r.owner != (membership.Holder{}) {
				return membership.Lease{}, fmt.Errorf("%w: %s by %s (incarnation %s) at epoch %d", membership.ErrHeld, lease,
					r.owner.Name, r.owner.Incarnation, r.epoch)
			}
			epoch++
		}
		b := m.batch(ctx)
		b.Query(m.takeLease, epoch, h.Name, h.Incarnation, secs, cluster, lease,
			nullable(r.epoch), nullable(r.owner.Name), nullable(r.owner.Incarnation), nullable(r.live))
		b.Query(m.leaseLive, secs, cluster, lease)
		answer := map[string]any{}
		var applied bool
		applied, last, err = execBatch(b, answer)
		if err != nil {
			return membership.Lease{}, m.fail(ctx, "acquire", err)
		}
		if applied {
			stored, found, err := m.readOne(ctx, cluster, kindLease, lease)
			if err != nil {
				return membership.Lease{}, m.fail(ctx, "acquire", err)
			}
			if !found {
				return membership.Lease{Name: lease, Owner: h, Epoch: epoch, Live: true}, nil
			}
			return stored.lease(), nil
		}
		if last != nil {
			// Of unknown outcome: read what it left.
			if r, _, err = m.readOne(ctx, cluster, kindLease, lease); err != nil {
				return membership.Lease{}, m.fail(ctx, "acquire", err)
			}
			continue
		}
		// Not applied: the answer holds the row's current epoch, owner
		// and live column, read by the transaction.
		r = membershipRow{kind: kindLease, name: lease}
		r.epoch, _ = answer["epoch"].(int64)
		r.owner.Name, _ = answer["owner_name"].(string)
		r.owner.Incarnation, _ = answer["owner_incarnation"].(string)
		r.live, _ = answer["live"].(bool)
	}
	return membership.Lease{}, m.fail(ctx, "acquire", contended(last))
}

// Release implements membership.Store: one UPDATE … IF owner_name = ? AND
// owner_incarnation = ?, a no-op when not applied.
func (m *Membership) Release(ctx context.Context, cluster, lease string, h membership.Holder) error {
	if err := membership.CheckLease(lease); err != nil {
		return err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	if err := m.ready(ctx); err != nil {
		return err
	}
	var last error
	for range membershipAttempts {
		var err error
		if _, last, err = m.execQuery(ctx, m.releaseLease, cluster, lease, h.Name, h.Incarnation); err != nil {
			return m.fail(ctx, "release", err)
		}
		if last == nil {
			return nil
		}
	}
	return m.fail(ctx, "release", contended(last))
}

// Members implements membership.Store: the live members (an expired
// member's row is gone), read at the store's read consistency.
func (m *Membership) Members(ctx context.Context, cluster string) ([]membership.Member, error) {
	if cluster == "" {
		return nil, fmt.Errorf("%w: empty cluster name", membership.ErrInvalid)
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := m.read(ctx, m.readKind, cluster, kindMember)
	if err != nil {
		return nil, m.fail(ctx, "members", err)
	}
	out := make([]membership.Member, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.member())
	}
	return out, nil
}

// Leases implements membership.Store: every lease ever acquired in the
// cluster (released and expired ones with their epochs), read at the
// store's read consistency.
func (m *Membership) Leases(ctx context.Context, cluster string) ([]membership.Lease, error) {
	if cluster == "" {
		return nil, fmt.Errorf("%w: empty cluster name", membership.ErrInvalid)
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	rows, err := m.read(ctx, m.readKind, cluster, kindLease)
	if err != nil {
		return nil, m.fail(ctx, "leases", err)
	}
	out := make([]membership.Lease, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.lease())
	}
	return out, nil
}
