package eventual

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/annals-go/annals/store/kafka/wire"
)

// KeyConcurrency is how many journals Replicate applies at once.
const KeyConcurrency = 16

// Replicate applies records, consecutive records of one partition of a
// topic in offset order, to the tables, then moves the partition's
// pointer to the last record's offset. Each key's actions are folded
// ([Batches]) and applied ([Apply]) in order; different keys concurrently,
// or, when t is a TxTables, one after another in one transaction with the
// pointer.
//
// Records without a key or an action header, and actions this version
// does not know, are skipped. A record that cannot be decoded is never
// skipped: the records before it are applied and the pointer moved to the
// one before it, and the call returns a *wire.RecordError naming topic,
// partition and offset (wrapping wire.ErrMalformed). On any other error the
// pointer is not moved; applying the same records again is safe.
func Replicate(ctx context.Context, t Tables, records []wire.Record, now time.Time) error {
	var (
		keys   []string
		byKey  = map[string][]ActionRecord{}
		bad    error
		usable = records
	)
	for i, r := range records {
		a, ok, err := wire.DecodeRecord(r)
		if err != nil {
			bad, usable = err, records[:i]
			break
		}
		if !ok {
			continue
		}
		if _, seen := byKey[a.ID]; !seen {
			keys = append(keys, a.ID)
		}
		byKey[a.ID] = append(byKey[a.ID], ActionRecord{Action: a, Partition: r.Partition, Offset: r.Offset,
			Timestamp: r.Timestamp, Headers: UserHeaders(r.Headers)})
	}
	if len(usable) == 0 {
		return bad
	}
	last := usable[len(usable)-1]
	if tt, ok := t.(TxTables); ok {
		ks := make([]Key, len(keys))
		for i, id := range keys {
			ks[i] = Key{ID: id, Topic: last.Topic}
		}
		err := tt.InTx(ctx, ks, func(tx Tables) error {
			for _, id := range keys {
				if err := Apply(ctx, tx, Key{ID: id, Topic: last.Topic}, last.Partition, Batches(byKey[id]), now); err != nil {
					return err
				}
			}
			return tx.SavePointer(ctx, last.Topic, last.Partition, last.Offset, now)
		})
		if err != nil {
			return err
		}
		return bad
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(KeyConcurrency)
	for _, id := range keys {
		g.Go(func() error {
			return Apply(gctx, t, Key{ID: id, Topic: last.Topic}, last.Partition, Batches(byKey[id]), now)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := t.SavePointer(ctx, last.Topic, last.Partition, last.Offset, now); err != nil {
		return err
	}
	return bad
}

// UserHeaders returns a record's headers other than the action, as text
// (nil when none).
func UserHeaders(h map[string][]byte) map[string]string {
	var out map[string]string
	for k, v := range h {
		if k == wire.HeaderKey {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = string(v)
	}
	return out
}
