package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"
)

// PurgeExpired purges, through the log, the journals whose expiry date
// (their last append plus its expire-after, see WithExpireAfter; Scala
// services set it too) is on or before now's date: a Purge action each,
// which the replicator applies like any other. Before each, the journal is
// read again (a Mark, its pointer and head): one appended since the
// eventual store recorded its expiry, or whose expiry moved, is left
// alone. It returns the ids purged. Run it daily (annals purge-expired).
func (j *Journal) PurgeExpired(ctx context.Context, now time.Time) ([]string, error) {
	if j.closed.Load() {
		return nil, journal.ErrClosed
	}
	var expired []eventual.Key
	for k, err := range j.tables.Expired(ctx, now) {
		if err != nil {
			return nil, fmt.Errorf("kafka journal: listing expired journals: %w", err)
		}
		expired = append(expired, k)
	}
	day := time.Date(now.UTC().Year(), now.UTC().Month(), now.UTC().Day(), 0, 0, 0, 0, time.UTC)
	var purged []string
	for _, k := range expired {
		v, err := j.readKey(ctx, k, false)
		if err != nil {
			return purged, err
		}
		if !v.has || v.purged || v.appendsFrom >= 0 || v.head.Expiry == nil || v.head.Expiry.On.After(day) {
			continue
		}
		if _, _, err := j.produce(ctx, k, wire.Header{Kind: wire.Purge}); err != nil {
			return purged, err
		}
		j.forget(k.ID)
		purged = append(purged, k.ID)
	}
	return purged, nil
}
