package console

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/query"
)

// statsTTL is how long the overview reuses the store's statistics (which
// a store computes by reading its tables).
const statsTTL = 30 * time.Second

// maxCounted bounds what the console reads to count events itself, on a
// store that keeps no statistics and cannot count a backlog.
const maxCounted = 200_000

// maxIDsScanned bounds the ids read to estimate the figures of a store
// that keeps no statistics.
const maxIDsScanned = 10_000

// storeStats are the overview's figures of the store.
type storeStats struct {
	Types        []typeStats `json:"entity_types"`
	Total        typeStats   `json:"total"`
	StorageBytes int64       `json:"storage_bytes"`
	// Source says where the figures come from; Estimate reports figures
	// the console counted itself within bounds.
	Source   string        `json:"source"`
	Estimate bool          `json:"estimate"`
	AsOf     time.Time     `json:"as_of"`
	Took     time.Duration `json:"took_ns"`
}

// typeStats are the figures of an entity type (admin.TypeStats), in JSON.
type typeStats struct {
	EntityType        string    `json:"entity_type,omitempty"`
	PersistenceIDs    int64     `json:"persistence_ids"`
	Events            int64     `json:"events"`
	PayloadBytes      int64     `json:"payload_bytes"`
	HighestSequenceNr int64     `json:"highest_sequence_nr"`
	Oldest            time.Time `json:"oldest_event,omitzero"`
	Newest            time.Time `json:"newest_event,omitzero"`
	Snapshots         int64     `json:"snapshots"`
	SnapshotBytes     int64     `json:"snapshot_bytes"`
}

func toTypeStats(t admin.TypeStats) typeStats {
	return typeStats{t.EntityType, t.PersistenceIDs, t.Events, t.PayloadBytes, t.HighestSequenceNr, t.Oldest.UTC(), t.Newest.UTC(), t.Snapshots, t.SnapshotBytes}
}

// sample is one point of the charts.
type sample struct {
	At time.Time `json:"at"`
	// Events were written in the interval that ends at At; PerSecond is
	// their rate.
	Events    int64   `json:"events"`
	PerSecond float64 `json:"per_second"`
	// Behind is the projections' backlog in events, and MaxLagSeconds
	// the largest lag of an instance; nil when not counted.
	Behind        *int64   `json:"behind,omitempty"`
	MaxLagSeconds *float64 `json:"max_lag_seconds,omitempty"`
}

// figures computes and caches the figures of the overview, the charts
// and the slices.
type figures struct {
	s *Server

	mu        sync.Mutex
	stats     *storeStats
	statsErr  error
	samples   []sample
	rateHow   string // how the events written are counted
	rateErr   string
	slices    *sliceCounts
	statsLock sync.Mutex // one Stats at a time

	// the counter of events written: a sequence mark, a time mark, or
	// the last total.
	mode     counterMode
	seqMark  int64
	timeMark time.Time
	total    int64
}

type counterMode int

const (
	counterUnknown counterMode = iota
	counterSequence
	counterTimestamp
	counterTotal
	counterNone
)

func newFigures(s *Server) *figures { return &figures{s: s} }

// storeStats returns the store's figures, from its statistics (cached for
// statsTTL), or counted by reading within bounds when it keeps none.
func (f *figures) storeStats(ctx context.Context) (*storeStats, error) {
	f.statsLock.Lock()
	defer f.statsLock.Unlock()
	f.mu.Lock()
	cached, err := f.stats, f.statsErr
	f.mu.Unlock()
	if cached != nil && time.Since(cached.AsOf) < statsTTL {
		return cached, err
	}
	start := time.Now()
	st, types, err := f.readStats(ctx)
	if err != nil {
		return nil, err
	}
	st.AsOf, st.Took = time.Now(), time.Since(start)
	var total admin.TypeStats
	for _, t := range types {
		total.Add(t)
		st.Types = append(st.Types, toTypeStats(t))
	}
	if len(types) > 0 || !st.Estimate {
		st.Total = toTypeStats(total)
	}
	f.mu.Lock()
	f.stats = st
	f.mu.Unlock()
	return st, nil
}

func (f *figures) readStats(ctx context.Context) (*storeStats, []admin.TypeStats, error) {
	st := f.s.st
	if sr, ok := st.Admin.(admin.StatsReader); ok {
		if est, types, err := f.estimated(ctx); err != nil || est != nil {
			return est, types, err
		}
		got, err := sr.Stats(ctx)
		if err != nil {
			return nil, nil, err
		}
		return &storeStats{StorageBytes: got.StorageBytes, Source: "the statistics the store keeps (admin.StatsReader)"}, got.EntityTypes, nil
	}
	return f.countStats(ctx)
}

// countStats estimates the figures of a store that keeps no statistics:
// its ids (up to maxIDsScanned), their highest numbers, and their events
// counted by reading each id's events, until maxCounted events.
func (f *figures) countStats(ctx context.Context) (*storeStats, []admin.TypeStats, error) {
	st := f.s.st
	q, ok := st.Queries.(query.PersistenceIDsQuery)
	if !ok {
		return nil, nil, fmt.Errorf("the %s store keeps no statistics and cannot list its ids", st.Kind)
	}
	ids, err := q.CurrentPersistenceIDs(ctx, "", "", maxIDsScanned+1)
	if err != nil {
		return nil, nil, err
	}
	out := &storeStats{Source: "counted by the console, reading the store's ids and events (the store keeps no statistics)"}
	if len(ids) > maxIDsScanned {
		ids = ids[:maxIDsScanned]
		out.Estimate = true
		out.Source = fmt.Sprintf("an estimate: counted by the console from the first %d ids only (the store keeps no statistics)", maxIDsScanned)
	}
	byType := map[string]*admin.TypeStats{}
	var order []string
	counted := int64(0)
	for _, id := range ids {
		et := annals.EntityType(id)
		t := byType[et]
		if t == nil {
			t = &admin.TypeStats{EntityType: et}
			byType[et] = t
			order = append(order, et)
		}
		t.PersistenceIDs++
		h, err := st.Journal.HighestSequenceNr(ctx, id, 0)
		if err != nil {
			return nil, nil, err
		}
		t.HighestSequenceNr = max(t.HighestSequenceNr, h)
		if counted >= maxCounted {
			out.Estimate = true
			continue
		}
		for r, err := range st.Journal.Replay(ctx, id, 1, h, maxCounted) {
			if err != nil {
				return nil, nil, err
			}
			counted++
			t.Events++
			t.PayloadBytes += int64(len(r.Payload))
			if t.Oldest.IsZero() || r.Timestamp.Before(t.Oldest) {
				t.Oldest = r.Timestamp
			}
			if r.Timestamp.After(t.Newest) {
				t.Newest = r.Timestamp
			}
		}
	}
	if out.Estimate && len(ids) < maxIDsScanned {
		out.Source = fmt.Sprintf("an estimate: counted by the console, reading at most %d events (the store keeps no statistics)", maxCounted)
	}
	sortStrings(order)
	var types []admin.TypeStats
	for _, et := range order {
		types = append(types, *byType[et])
	}
	return out, types, nil
}

// backlog counts the events after an offset that match a filter: with the
// store's admin.BacklogReader, else (given an entity type) by reading its
// events by slices, up to maxCounted (exact reports whether the count is
// whole).
func (f *figures) backlog(ctx context.Context, after query.Offset, flt admin.EventFilter) (b admin.Backlog, exact bool, err error) {
	st := f.s.st
	if br, ok := st.Admin.(admin.BacklogReader); ok {
		b, err := br.Backlog(ctx, after, flt)
		return b, true, err
	}
	q, ok := st.Queries.(query.EventsBySlicesQuery)
	if !ok || flt.EntityType == "" {
		return admin.Backlog{}, false, errCannotCount
	}
	return countEvents(q.CurrentEventsBySlices(ctx, flt.EntityType, flt.MinSlice, flt.MaxSlice, after), flt)
}

var errCannotCount = errors.New("this store cannot count the events after an offset")

func countEvents(events iter.Seq2[query.Envelope, error], flt admin.EventFilter) (admin.Backlog, bool, error) {
	var b admin.Backlog
	for env, err := range events {
		if err != nil {
			return b, false, err
		}
		if flt.Tag != "" && !contains(env.Tags, flt.Tag) {
			continue
		}
		b.Events++
		if b.Oldest.IsZero() || env.Timestamp.Before(b.Oldest) {
			b.Oldest = env.Timestamp
		}
		if env.Timestamp.After(b.Newest) {
			b.Newest = env.Timestamp
		}
		if b.Events >= maxCounted {
			return b, false, nil
		}
	}
	return b, true, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

var allSlices = admin.EventFilter{MinSlice: 0, MaxSlice: annals.NumberOfSlices - 1}

// highestOrdering finds the highest sequence offset of a store that
// counts backlogs after sequence offsets: from a number known not to be
// above it, it adds the count of the events after it until none are left
// (orderings are distinct, so the highest is at least the mark plus the
// count after it).
func highestOrdering(ctx context.Context, br admin.BacklogReader, lo int64) (int64, error) {
	for range 64 {
		b, err := br.Backlog(ctx, query.SequenceOffset(lo), allSlices)
		if err != nil {
			return 0, err
		}
		if b.Events == 0 {
			return lo, nil
		}
		lo += b.Events
	}
	return lo, nil
}

// startNow returns the offset after which a live query returns the events
// written from now on, for a query of kind read (current events by slices
// or tag, to read through when the store offers nothing better).
func (f *figures) startNow(ctx context.Context, current func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error]) (query.Offset, error) {
	if br, ok := f.s.st.Admin.(admin.BacklogReader); ok {
		hi, err := highestOrdering(ctx, br, 0)
		if err == nil {
			return query.SequenceOffset(hi), nil
		}
		if !errors.Is(err, query.ErrUnsupportedOffset) {
			return query.Offset{}, err
		}
		if _, err := br.Backlog(ctx, query.TimestampOffset(time.Now(), nil), allSlices); err == nil {
			return query.TimestampOffset(time.Now(), nil), nil
		}
	}
	last, n := query.NoOffset(), 0
	for env, err := range current(ctx, query.NoOffset()) {
		if err != nil {
			return query.Offset{}, err
		}
		last = env.Offset
		if n++; n > maxCounted {
			return query.Offset{}, badRequest("more than %d events to read through to find the newest; choose to start from the beginning", maxCounted)
		}
	}
	return last, nil
}

// run samples the charts' figures until ctx ends.
func (f *figures) run(ctx context.Context) {
	every := f.s.opt.SampleEvery
	f.prime(ctx)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.tick(ctx)
		}
	}
}

// prime chooses how the events written are counted and, where the store
// can count the events after a time, fills the chart's past.
func (f *figures) prime(ctx context.Context) {
	st := f.s.st
	every, n := f.s.opt.SampleEvery, f.s.opt.Samples
	now := time.Now()
	mode, how := counterNone, ""
	var past []sample
	if br, ok := st.Admin.(admin.BacklogReader); ok {
		if hi, err := f.orderingMark(ctx, br); err == nil {
			mode, how = counterSequence, "events counted after the previous sample's position in the journal (admin.BacklogReader), since the console started"
			f.seqMark = hi
		} else if errors.Is(err, query.ErrUnsupportedOffset) {
			// A timestamp store: count the past minutes too.
			counts := make([]int64, n+1)
			ok := true
			for k := n; k >= 0; k-- {
				b, err := br.Backlog(ctx, query.TimestampOffset(now.Add(-time.Duration(k)*every), nil), allSlices)
				if err != nil {
					ok = false
					break
				}
				counts[n-k] = b.Events
			}
			if ok {
				mode, how = counterTimestamp, "events counted by write time (admin.BacklogReader), including the minutes before the console started"
				f.timeMark = now
				for i := 1; i <= n; i++ {
					ev := counts[i-1] - counts[i]
					past = append(past, sample{At: now.Add(-time.Duration(n-i) * every), Events: ev, PerSecond: float64(ev) / every.Seconds()})
				}
			}
		}
	}
	if mode == counterNone {
		if sts, err := f.storeStats(ctx); err == nil {
			mode = counterTotal
			f.total = sts.Total.Events
			how = "the change of the store's event count between samples (" + sts.Source + "), since the console started"
			if sts.Estimate {
				how += "; an estimate"
			}
		} else {
			f.mu.Lock()
			f.rateErr = "this store cannot count the events written: " + err.Error()
			f.mu.Unlock()
		}
	}
	f.mu.Lock()
	f.mode, f.rateHow, f.samples = mode, how, past
	f.mu.Unlock()
}

// tick takes one sample.
func (f *figures) tick(ctx context.Context) {
	now := time.Now()
	every := f.s.opt.SampleEvery
	sm := sample{At: now}
	var events int64 = -1
	br, _ := f.s.st.Admin.(admin.BacklogReader)
	switch f.mode {
	case counterSequence:
		if hi, err := highestOrdering(ctx, br, f.seqMark); err == nil {
			events, f.seqMark = hi-f.seqMark, hi
		}
	case counterTimestamp:
		if b, err := br.Backlog(ctx, query.TimestampOffset(f.timeMark, nil), allSlices); err == nil {
			events, f.timeMark = b.Events, now
		}
	case counterTotal:
		if sts, err := f.storeStats(ctx); err == nil {
			events, f.total = max(0, sts.Total.Events-f.total), sts.Total.Events
		}
	}
	if events >= 0 {
		sm.Events, sm.PerSecond = events, float64(events)/every.Seconds()
	}
	if rows, err := f.s.instances(ctx); err == nil && len(rows) > 0 {
		var behind int64
		var lag float64
		counted := false
		for _, r := range rows {
			if r.Pending != nil {
				behind += *r.Pending
				lag = max(lag, *r.LagSeconds)
				counted = true
			}
		}
		if counted {
			sm.Behind, sm.MaxLagSeconds = &behind, &lag
		}
	}
	if ctx.Err() != nil {
		return
	}
	f.mu.Lock()
	f.samples = append(f.samples, sm)
	if over := len(f.samples) - f.s.opt.Samples; over > 0 {
		f.samples = append([]sample(nil), f.samples[over:]...)
	}
	f.mu.Unlock()
}

// chart returns the samples and how they were counted.
func (f *figures) chart() ([]sample, string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sample(nil), f.samples...), f.rateHow, f.rateErr
}
