package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// The operator capabilities of package admin, for the annals command.

var (
	_ admin.Migrator         = (*Migrator)(nil)
	_ admin.StatsReader      = (*Store)(nil)
	_ admin.ProjectionLister = (*Store)(nil)
	_ admin.BacklogReader    = (*Store)(nil)
	_ admin.Purger           = (*Store)(nil)
	_ admin.BaselineOpener   = (*Store)(nil)
	_ admin.IntegrityChecker = (*Store)(nil)
)

// CheckIntegrity implements admin.IntegrityChecker with SQLite's
// integrity_check: every page of the file, every index against its table
// (at most 100 problems are listed).
func (s *Store) CheckIntegrity(ctx context.Context) ([]string, error) {
	var problems []string
	err := s.ReadTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `PRAGMA integrity_check(100)`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				return err
			}
			if line != "ok" {
				problems = append(problems, line)
			}
		}
		return rows.Err()
	})
	if err != nil {
		// A file too damaged to read at all is a finding, not a failure
		// of the check.
		if strings.Contains(err.Error(), "malformed") || strings.Contains(err.Error(), "not a database") {
			return []string{err.Error()}, nil
		}
		return nil, fmt.Errorf("sqlite: integrity check of %s: %w", s.path, err)
	}
	return problems, nil
}

// Migrator is the admin.Migrator of an SQLite database file, which it
// inspects without opening it as a Store (Open migrates).
type Migrator struct {
	path string
}

// NewMigrator returns the migrator of the database file named by dsn, in
// the forms Open accepts ("sqlite:./annals.db"). It does not touch the file.
func NewMigrator(dsn string) (*Migrator, error) {
	path, err := filePath(dsn)
	if err != nil {
		return nil, err
	}
	return &Migrator{path: path}, nil
}

// filePath is the file named by an Open dsn.
func filePath(dsn string) (string, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "sqlite:")
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return "", fmt.Errorf("sqlite: %q is not a file path (use a path such as ./annals.db; for an in-memory store use store/memory)", dsn)
	}
	return path, nil
}

// Path returns the database file's path.
func (m *Migrator) Path() string { return m.path }

// SchemaVersion implements admin.Migrator: 0 for a missing or empty file.
// It refuses, as Open does, a file that is not an Annals database or has a
// newer schema.
func (m *Migrator) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	if err := inspect(ctx, m.path); err != nil {
		return 0, SchemaVersion, err
	}
	st, err := os.Stat(m.path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && st.Size() == 0) {
		return 0, SchemaVersion, nil
	}
	db, err := openProbe(m.path)
	if err != nil {
		return 0, SchemaVersion, fmt.Errorf("sqlite: open %s: %w", m.path, err)
	}
	defer db.Close()
	v, err := readVersion(ctx, db)
	if err != nil {
		return 0, SchemaVersion, fmt.Errorf("sqlite: inspect %s: %w", m.path, err)
	}
	return v, SchemaVersion, nil
}

// PendingMigrations implements admin.Migrator. The SQL of each step is
// what Open runs for it; the first step of a new database also creates the
// schema-version table, and the last one records the new version.
func (m *Migrator) PendingMigrations(ctx context.Context) ([]admin.Migration, error) {
	current, _, err := m.SchemaVersion(ctx)
	if err != nil {
		return nil, err
	}
	return pending(current), nil
}

func pending(current int) []admin.Migration {
	var steps []admin.Migration
	for v := current; v < SchemaVersion; v++ {
		var b strings.Builder
		if v == 0 {
			b.WriteString(schemaTable + ";\nINSERT INTO annals_schema (id, version) VALUES (1, 0);\n")
		}
		b.WriteString(strings.TrimSpace(migrations[v]))
		b.WriteString("\n")
		if v == SchemaVersion-1 {
			fmt.Fprintf(&b, "UPDATE annals_schema SET version = %d WHERE id = 1;\n", SchemaVersion)
		}
		steps = append(steps, admin.Migration{From: v, To: v + 1, SQL: b.String()})
	}
	return steps
}

// Migrate implements admin.Migrator: it creates the file if missing and
// runs the pending steps in one transaction, as Open does.
func (m *Migrator) Migrate(ctx context.Context) ([]admin.Migration, error) {
	steps, err := m.PendingMigrations(ctx)
	if err != nil || len(steps) == 0 {
		return nil, err
	}
	s, err := Open(ctx, m.path)
	if err != nil {
		return nil, err
	}
	return steps, s.Close()
}

// typeOf is annals.EntityType in SQL: the part of the id before the first
// separator, or the whole id.
const typeOf = `CASE WHEN instr(persistence_id, '` + annals.Separator + `') > 0 THEN substr(persistence_id, 1, instr(persistence_id, '` + annals.Separator + `') - 1) ELSE persistence_id END`

// Stats implements admin.StatsReader, in one read transaction.
// StorageBytes is the size of the database file and its write-ahead log.
func (s *Store) Stats(ctx context.Context) (admin.Stats, error) {
	byType := map[string]*admin.TypeStats{}
	get := func(t string) *admin.TypeStats {
		if byType[t] == nil {
			byType[t] = &admin.TypeStats{EntityType: t}
		}
		return byType[t]
	}
	err := s.ReadTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT entity_type, count(DISTINCT persistence_id), count(*), coalesce(sum(length(payload)), 0), max(sequence_nr), min(timestamp), max(timestamp)
			FROM event_journal GROUP BY entity_type`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var t string
			var ids, n, bytes, hi, lo, up int64
			if err := rows.Scan(&t, &ids, &n, &bytes, &hi, &lo, &up); err != nil {
				rows.Close()
				return err
			}
			ts := get(t)
			ts.PersistenceIDs, ts.Events, ts.PayloadBytes, ts.HighestSequenceNr = ids, n, bytes, hi
			ts.Oldest, ts.Newest = time.Unix(0, lo).UTC(), time.Unix(0, up).UTC()
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// Ids whose events were all deleted, and the deleted highest
		// numbers.
		rows, err = tx.QueryContext(ctx, `SELECT `+typeOf+` AS t,
				count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM event_journal e WHERE e.persistence_id = m.persistence_id)),
				max(sequence_nr)
			FROM journal_metadata m GROUP BY t`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var t string
			var ids, hi int64
			if err := rows.Scan(&t, &ids, &hi); err != nil {
				rows.Close()
				return err
			}
			ts := get(t)
			ts.PersistenceIDs += ids
			ts.HighestSequenceNr = max(ts.HighestSequenceNr, hi)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, `SELECT `+typeOf+` AS t, count(*), coalesce(sum(length(payload)), 0) FROM snapshot GROUP BY t`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t string
			var n, bytes int64
			if err := rows.Scan(&t, &n, &bytes); err != nil {
				return err
			}
			ts := get(t)
			ts.Snapshots, ts.SnapshotBytes = n, bytes
		}
		return rows.Err()
	})
	if err != nil {
		return admin.Stats{}, s.errs.Map(ctx, "stats", err, journal.ErrClosed)
	}
	var st admin.Stats
	for _, ts := range byType {
		st.EntityTypes = append(st.EntityTypes, *ts)
	}
	slices.SortFunc(st.EntityTypes, func(a, b admin.TypeStats) int { return strings.Compare(a.EntityType, b.EntityType) })
	for _, p := range []string{s.path, s.path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			st.StorageBytes += fi.Size()
		}
	}
	return st, nil
}

// ListProjections implements admin.ProjectionLister.
func (s *Store) ListProjections(ctx context.Context) ([]admin.ProjectionInstance, error) {
	var out []admin.ProjectionInstance
	err := s.ReadTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT name, key, max(off), max(paused), max(updated) FROM (
				SELECT projection_name AS name, projection_key AS key, current_offset AS off, NULL AS paused, last_updated AS updated FROM projection_offset
				UNION ALL
				SELECT projection_name, projection_key, NULL, paused, last_updated FROM projection_management)
			GROUP BY name, key ORDER BY name, key`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p admin.ProjectionInstance
			var off sql.NullString
			var paused sql.NullBool
			var updated int64
			if err := rows.Scan(&p.ID.Name, &p.ID.Key, &off, &paused, &updated); err != nil {
				return err
			}
			if off.Valid {
				if err := json.Unmarshal([]byte(off.String), &p.Offset); err != nil {
					return fmt.Errorf("projection %s: stored offset: %w", p.ID, err)
				}
			}
			p.Paused = paused.Valid && paused.Bool
			p.Updated = time.Unix(0, updated).UTC()
			out = append(out, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.errs.Map(ctx, "list projections", err, journal.ErrClosed)
	}
	return out, nil
}

// Backlog implements admin.BacklogReader for sequence offsets.
func (s *Store) Backlog(ctx context.Context, after query.Offset, f admin.EventFilter) (admin.Backlog, error) {
	from, err := sequenceOf(after)
	if err != nil {
		return admin.Backlog{}, err
	}
	var b admin.Backlog
	var lo, up sql.NullInt64
	err = s.ReadTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT count(*), min(e.timestamp), max(e.timestamp) FROM event_journal e
			WHERE e.ordering > ?1 AND (?2 = '' OR e.entity_type = ?2) AND e.slice BETWEEN ?3 AND ?4
				AND (?5 = '' OR EXISTS (SELECT 1 FROM event_tag t WHERE t.tag = ?5 AND t.ordering = e.ordering))`,
			from, f.EntityType, f.MinSlice, f.MaxSlice, f.Tag).Scan(&b.Events, &lo, &up)
	})
	if err != nil {
		return admin.Backlog{}, s.errs.Map(ctx, "backlog", err, journal.ErrClosed)
	}
	if lo.Valid {
		b.Oldest, b.Newest = time.Unix(0, lo.Int64).UTC(), time.Unix(0, up.Int64).UTC()
	}
	return b, nil
}

// Purge implements admin.Purger in one transaction.
func (s *Store) Purge(ctx context.Context, persistenceIDs []string) error {
	if len(persistenceIDs) == 0 {
		return nil
	}
	tx, release, err := s.writeTxn(ctx)
	if err != nil {
		return s.errs.Map(ctx, "begin purge", err, journal.ErrClosed)
	}
	defer release()
	dctx := context.WithoutCancel(ctx)
	for _, pid := range persistenceIDs {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM event_tag WHERE ordering IN (SELECT ordering FROM event_journal WHERE persistence_id = ? AND tags IS NOT NULL)`,
			`DELETE FROM event_journal WHERE persistence_id = ?`,
			`DELETE FROM journal_metadata WHERE persistence_id = ?`,
			`DELETE FROM snapshot WHERE persistence_id = ?`,
		} {
			if _, err := tx.ExecContext(dctx, q, pid); err != nil {
				return s.errs.Map(ctx, "purge", err, journal.ErrClosed)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return s.errs.Map(ctx, "commit purge", err, journal.ErrClosed)
	}
	return nil
}

// RewriteSerializerID implements admin.SerializerRewriter in one write
// transaction (rolled back for a dry run).
func (s *Store) RewriteSerializerID(ctx context.Context, from, to int32, dryRun bool) (admin.Rewritten, error) {
	var r admin.Rewritten
	if from == to {
		return r, nil
	}
	tx, release, err := s.writeTxn(ctx)
	if err != nil {
		return r, s.errs.Map(ctx, "rewrite serializer", err, journal.ErrClosed)
	}
	defer release()
	dctx := context.WithoutCancel(ctx)
	for _, u := range []struct {
		table string
		n     *int64
	}{{"event_journal", &r.Events}, {"snapshot", &r.Snapshots}, {"durable_state", &r.DurableStates}} {
		res, err := tx.ExecContext(dctx, `UPDATE `+u.table+` SET serializer_id = ? WHERE serializer_id = ?`, to, from)
		if err != nil {
			return admin.Rewritten{}, s.errs.Map(ctx, "rewrite serializer", err, journal.ErrClosed)
		}
		if *u.n, err = res.RowsAffected(); err != nil {
			return admin.Rewritten{}, s.errs.Map(ctx, "rewrite serializer", err, journal.ErrClosed)
		}
	}
	if dryRun {
		return r, nil // released: rolled back
	}
	if err := tx.Commit(); err != nil {
		return admin.Rewritten{}, s.errs.Map(ctx, "rewrite serializer", err, journal.ErrClosed)
	}
	return r, nil
}

// OpenBaseline implements admin.BaselineOpener: mattn/go-sqlite3 through
// database/sql on the store's file, with the store's pragmas (WAL, the
// same synchronous setting and busy timeout), one writer connection and
// one reader, statements prepared once, run (as the store runs them)
// without a cancellable context, which the driver would watch with a
// goroutine per statement.
func (s *Store) OpenBaseline(ctx context.Context) (admin.Baseline, error) {
	w, err := openPool(s.path, "rwc", s.cfg.sync, s.cfg.busyTimeout.Milliseconds(), 1)
	if err != nil {
		return nil, err
	}
	r, err := openPool(s.path, "ro", s.cfg.sync, s.cfg.busyTimeout.Milliseconds(), 1)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	b := &baseline{w: w, r: r}
	for _, p := range []struct {
		db   *sql.DB
		to   **sql.Stmt
		text string
	}{
		{w, &b.insert, `INSERT INTO event_journal (persistence_id, sequence_nr, timestamp, payload, serializer_id, manifest, writer, tags, metadata, slice, entity_type) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)`},
		{r, &b.replay, `SELECT ` + envelopeColumns + ` FROM event_journal e WHERE e.persistence_id = ? AND e.sequence_nr BETWEEN 1 AND ? ORDER BY e.sequence_nr`},
		{r, &b.slices, `SELECT ` + envelopeColumns + ` FROM event_journal e INDEXED BY event_journal_type_ordering_idx
			WHERE e.entity_type = ? AND e.slice BETWEEN ? AND ? ORDER BY e.ordering`},
	} {
		if *p.to, err = p.db.PrepareContext(ctx, p.text); err != nil {
			_ = b.Close()
			return nil, err
		}
	}
	return b, nil
}

type baseline struct {
	w, r                   *sql.DB
	insert, replay, slices *sql.Stmt
}

func (b *baseline) Close() error {
	for _, st := range []*sql.Stmt{b.insert, b.replay, b.slices} {
		if st != nil {
			_ = st.Close()
		}
	}
	return errors.Join(b.w.Close(), b.r.Close())
}

// InsertRaw implements admin.Baseline.
func (b *baseline) InsertRaw(ctx context.Context, events []journal.Repr) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tx, err := b.w.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt := tx.Stmt(b.insert)
	now := time.Now().UnixNano()
	for _, e := range events {
		if _, err := stmt.Exec(e.PersistenceID, e.SequenceNr, now, e.Payload, e.SerializerID, e.Manifest, e.WriterID, annals.Slice(e.PersistenceID), annals.EntityType(e.PersistenceID)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// scanAll reads every row of stmt, scanning the columns of an event.
func (b *baseline) scanAll(ctx context.Context, stmt *sql.Stmt, args ...any) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	rows, err := stmt.Query(args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var e journal.Repr
		var ts int64
		var tags sql.NullString
		if err := rows.Scan(&e.Ordering, &e.PersistenceID, &e.SequenceNr, &ts, &e.Payload, &e.SerializerID, &e.Manifest, &e.WriterID, &tags, &e.Metadata, &e.Slice, &e.EntityType); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// ReplayRaw implements admin.Baseline.
func (b *baseline) ReplayRaw(ctx context.Context, persistenceID string, to int64) (int64, error) {
	return b.scanAll(ctx, b.replay, persistenceID, to)
}

// ScanSlicesRaw implements admin.Baseline.
func (b *baseline) ScanSlicesRaw(ctx context.Context, entityType string, minSlice, maxSlice int) (int64, error) {
	return b.scanAll(ctx, b.slices, entityType, minSlice, maxSlice)
}
