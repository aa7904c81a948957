package cassandra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
)

var _ admin.StatsReader = (*Store)(nil)

// Where names the store for people: its hosts and keyspace.
func (s *Store) Where() string {
	return fmt.Sprintf("%s keyspace %s", strings.Join(s.cfg.hosts, ","), s.cfg.keyspace)
}

// Stats implements admin.StatsReader by reading the whole of messages,
// metadata and snapshots (Cassandra keeps no counts): its cost grows with
// the keyspace, as `nodetool tablestats` does not. Figures are read table
// after table, not from one snapshot of the data. StorageBytes is 0
// (unknown).
func (s *Store) Stats(ctx context.Context) (admin.Stats, error) {
	types := map[string]*admin.TypeStats{}
	ids := map[string]bool{}
	of := func(pid string) *admin.TypeStats {
		et := annals.EntityType(pid)
		ts := types[et]
		if ts == nil {
			ts = &admin.TypeStats{EntityType: et}
			types[et] = ts
		}
		if !ids[pid] {
			ids[pid] = true
			ts.PersistenceIDs++
		}
		return ts
	}
	ks := s.cfg.keyspace
	scan := func(cql string, dest []any, row func()) error {
		it := s.session.Query(cql).WithContext(ctx).Consistency(s.cfg.readCL).Iter()
		for it.Scan(dest...) {
			row()
		}
		if err := it.Close(); err != nil {
			return s.errs.Map(ctx, "stats", err, errClosed)
		}
		return nil
	}
	var (
		pid   string
		seq   *int64
		uuid  gocql.UUID
		event []byte
	)
	err := scan(`SELECT persistence_id, sequence_nr, timestamp, event FROM `+ks+`.messages`, []any{&pid, &seq, &uuid, &event}, func() {
		if seq == nil { // a partition whose events were all deleted keeps its static guard
			return
		}
		ts := of(pid)
		ts.Events++
		ts.PayloadBytes += int64(len(event))
		ts.HighestSequenceNr = max(ts.HighestSequenceNr, *seq)
		at := uuid.Time()
		if ts.Oldest.IsZero() || at.Before(ts.Oldest) {
			ts.Oldest = at
		}
		if at.After(ts.Newest) {
			ts.Newest = at
		}
	})
	if err != nil {
		return admin.Stats{}, err
	}
	var deleted *int64
	if err := scan(`SELECT persistence_id, deleted_to FROM `+ks+`.metadata`, []any{&pid, &deleted}, func() {
		if deleted != nil {
			ts := of(pid)
			ts.HighestSequenceNr = max(ts.HighestSequenceNr, *deleted)
		}
	}); err != nil {
		return admin.Stats{}, err
	}
	var snap []byte
	if err := scan(`SELECT persistence_id, snapshot_data FROM `+ks+`.snapshots`, []any{&pid, &snap}, func() {
		ts := of(pid)
		ts.Snapshots++
		ts.SnapshotBytes += int64(len(snap))
	}); err != nil {
		return admin.Stats{}, err
	}
	var out admin.Stats
	for _, ts := range types {
		ts.Oldest, ts.Newest = utcOrZero(ts.Oldest), utcOrZero(ts.Newest)
		out.EntityTypes = append(out.EntityTypes, *ts)
	}
	slices.SortFunc(out.EntityTypes, func(a, b admin.TypeStats) int { return strings.Compare(a.EntityType, b.EntityType) })
	return out, nil
}

func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// Drop removes the migrator's keyspace and everything in it.
func (m *Migrator) Drop(ctx context.Context) error {
	if err := m.s.session.Query(`DROP KEYSPACE IF EXISTS ` + m.s.cfg.keyspace).WithContext(ctx).Consistency(gocql.All).Exec(); err != nil {
		return m.s.errs.Map(ctx, "drop keyspace", err, errClosed)
	}
	return nil
}
