package eventual

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/annals-go/annals/store/kafka/wire"
)

// KeyConcurrency is how many journals Replicate applies at once.
const KeyConcurrency = 16

// TxShards is how many transactions Replicate runs at once on a
// TxTables, for a poll of at least ShardRecords records: each holds the
// writes of a share of the poll's keys, and the pointer moves after all
// of them commit, in a transaction of its own. Smaller polls are one
// transaction with the pointer.
const TxShards = 4

// ShardRecords is the smallest poll Replicate splits into TxShards
// transactions.
const ShardRecords = 2048

// decodeChunk is how many records one goroutine of Replicate decodes.
const decodeChunk = 1024

// Replicate applies records, consecutive records of one partition of a
// topic in offset order, to the tables, then moves the partition's
// pointer to the last record's offset. Each key's actions are folded
// ([Batches]) and applied ([Apply]) in order; different keys concurrently,
// or, when t is a TxTables, one after another in one transaction with the
// pointer; a poll of ShardRecords records or more is split by key into
// TxShards transactions run at once, and the pointer moves after they all
// commit. The records are decoded a chunk per goroutine.
//
// Records without a key or an action header, and actions this version
// does not know, are skipped. A record that cannot be decoded is never
// skipped: the records before it are applied and the pointer moved to the
// one before it, and the call returns a *wire.RecordError naming topic,
// partition and offset (wrapping wire.ErrMalformed). On any other error the
// pointer is not moved; applying the same records again is safe.
func Replicate(ctx context.Context, t Tables, records []wire.Record, now time.Time) error {
	return ReplicateKnown(ctx, t, nil, records, now)
}

// ReplicateKnown is Replicate remembering heads in heads (nil: none): a
// key whose head heads knows is applied without reading it, and each key
// applied leaves there the head the store holds after it. When any key
// fails, the partition's heads are forgotten, since a failed write may or
// may not have been stored. A TxTables reads its heads within its
// transactions, so heads is not used with one.
func ReplicateKnown(ctx context.Context, t Tables, heads *Heads, records []wire.Record, now time.Time) error {
	decoded, bad := decodeAll(records)
	var (
		keys   []string
		byKey  = map[string][]ActionRecord{}
		usable = records[:len(decoded)]
	)
	for i, d := range decoded {
		if !d.ok {
			continue
		}
		a, r := d.action, records[i]
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
	apply := func(ctx context.Context, t Tables, ids []string) error {
		for _, id := range ids {
			if err := Apply(ctx, t, Key{ID: id, Topic: last.Topic}, last.Partition, Batches(byKey[id]), now); err != nil {
				return err
			}
		}
		return nil
	}
	if tt, ok := t.(TxTables); ok {
		if len(usable) < ShardRecords || len(keys) < TxShards {
			err := tt.InTx(ctx, keysOf(last.Topic, keys), func(tx Tables) error {
				if err := apply(ctx, tx, keys); err != nil {
					return err
				}
				return tx.SavePointer(ctx, last.Topic, last.Partition, last.Offset, now)
			})
			if err != nil {
				return err
			}
			return bad
		}
		g, gctx := errgroup.WithContext(ctx)
		for i := range TxShards {
			ids := keys[i*len(keys)/TxShards : (i+1)*len(keys)/TxShards]
			g.Go(func() error {
				return tt.InTx(gctx, keysOf(last.Topic, ids), func(tx Tables) error { return apply(gctx, tx, ids) })
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
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(KeyConcurrency)
	for _, id := range keys {
		g.Go(func() error {
			return applyKnown(gctx, t, heads, Key{ID: id, Topic: last.Topic}, last.Partition, Batches(byKey[id]), now)
		})
	}
	if err := g.Wait(); err != nil {
		heads.Forget(last.Topic, last.Partition)
		return err
	}
	if err := t.SavePointer(ctx, last.Topic, last.Partition, last.Offset, now); err != nil {
		return err
	}
	return bad
}

// keysOf returns the keys of ids on topic.
func keysOf(topic string, ids []string) []Key {
	ks := make([]Key, len(ids))
	for i, id := range ids {
		ks[i] = Key{ID: id, Topic: topic}
	}
	return ks
}

// decoded is a record's action; ok is false for a record that holds none.
type decoded struct {
	action wire.Action
	ok     bool
}

// decodeAll decodes records, a chunk per goroutine, up to the first that
// cannot be decoded: out holds the records before it, bad its error.
func decodeAll(records []wire.Record) (out []decoded, bad error) {
	out = make([]decoded, len(records))
	errs := make([]error, len(records))
	var wg sync.WaitGroup
	for from := 0; from < len(records); from += decodeChunk {
		chunk := records[from:min(from+decodeChunk, len(records))]
		wg.Go(func() {
			for i, r := range chunk {
				a, ok, err := wire.DecodeRecord(r)
				if err != nil {
					errs[from+i] = err
					return // the records after it are not applied
				}
				out[from+i] = decoded{a, ok}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return out[:i], err
		}
	}
	return out, nil
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
