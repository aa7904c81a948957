package kafka

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka/eventual"
)

// ErrNoSummaries reports an eventual store that cannot summarize what it
// holds.
var ErrNoSummaries = errors.New("kafka journal: the eventual store gives no statistics")

// Stats implements admin.StatsReader from what the eventual store holds:
// replicated journals only (what the topic holds beyond the pointers is
// not counted), payload bytes as stored (the persistence adapter's form),
// no snapshots (the snapshot store reports its own). It reads the whole
// eventual store.
func (j *Journal) Stats(ctx context.Context) (admin.Stats, error) {
	if j.closed.Load() {
		return admin.Stats{}, journal.ErrClosed
	}
	sz, ok := j.tables.(eventual.Summarizer)
	if !ok {
		return admin.Stats{}, ErrNoSummaries
	}
	types := map[string]*admin.TypeStats{}
	for sm, err := range sz.Summaries(ctx) {
		if err != nil {
			return admin.Stats{}, err
		}
		et := annals.EntityType(sm.Key.ID)
		ts := types[et]
		if ts == nil {
			ts = &admin.TypeStats{EntityType: et}
			types[et] = ts
		}
		ts.Add(admin.TypeStats{PersistenceIDs: 1, Events: sm.Events, PayloadBytes: sm.PayloadBytes, HighestSequenceNr: sm.SeqNr,
			Oldest: sm.Oldest, Newest: sm.Newest})
	}
	var out admin.Stats
	for _, ts := range types {
		out.EntityTypes = append(out.EntityTypes, *ts)
	}
	slices.SortFunc(out.EntityTypes, func(a, b admin.TypeStats) int { return strings.Compare(a.EntityType, b.EntityType) })
	return out, nil
}

var _ admin.StatsReader = (*Journal)(nil)
