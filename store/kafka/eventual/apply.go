package eventual

import (
	"context"
	"fmt"
	"time"
)

// Apply applies one key's batches (from [Batches]) in a partition to the
// tables, with the Scala replicator's rules:
//
//   - Appends: a journal without a head gets one (deleted to the number
//     before its first event, a new record id, the expiry of the last
//     append's metadata); events go into their segments first, then the
//     head takes the last sequence number and the batch's offset. Events
//     at or below the head's offset were applied before and are skipped,
//     so a batch re-applied after a crash stores nothing twice.
//   - Delete: a journal without a head gets one with sequence number and
//     deleted-to both at the delete's number (the journal restarts
//     there). Otherwise the mark moves to the smaller of the delete's
//     number and the journal's last number, and the events up to it are
//     removed.
//   - Purge: the journal's events and its head are removed; its next
//     append starts a new journal. A journal without a head is left alone.
//
// A batch whose offset the head already records as applied changes
// nothing. now is stored as the head's created or updated time.
func Apply(ctx context.Context, t Tables, key Key, partition int32, batches []Batch, now time.Time) error {
	return applyKnown(ctx, t, nil, key, partition, batches, now)
}

// applyKnown is Apply taking key's head from heads when known there
// (reading it otherwise), and recording there the head the store holds
// after the batches are applied.
func applyKnown(ctx context.Context, t Tables, heads *Heads, key Key, partition int32, batches []Batch, now time.Time) error {
	if len(batches) == 0 {
		return nil
	}
	k, known := heads.get(key, partition)
	if !known {
		head, ok, err := t.Head(ctx, key)
		if err != nil {
			return err
		}
		heads.read()
		k = knownHead{head, ok}
	}
	a := applier{t: t, key: key, partition: partition, now: now, head: k.head, has: k.has}
	var err error
	for _, b := range batches {
		switch b.Kind {
		case Appends:
			err = a.appends(ctx, b)
		case DeleteBatch:
			err = a.delete(ctx, b)
		case PurgeBatch:
			err = a.purge(ctx, b)
		}
		if err != nil {
			return fmt.Errorf("kafka journal: replicating %s of %q on %s/%d at offset %d: %w", kindName(b.Kind), key.ID, key.Topic, partition, b.Offset, err)
		}
	}
	heads.put(key, partition, knownHead{a.head, a.has})
	return nil
}

func kindName(k BatchKind) string {
	return map[BatchKind]string{Appends: "appends", DeleteBatch: "a delete", PurgeBatch: "a purge"}[k]
}

type applier struct {
	t         Tables
	key       Key
	partition int32
	now       time.Time
	head      Head
	has       bool
}

func (a *applier) appends(ctx context.Context, b Batch) error {
	if a.has && b.Offset <= a.head.Offset {
		return nil
	}
	var records []Record
	for _, r := range b.Records {
		if a.has && r.Offset <= a.head.Offset {
			continue
		}
		h := r.Action.Header
		for _, e := range r.Action.Events.Events {
			records = append(records, Record{
				Event: e, Timestamp: r.Timestamp, Origin: h.Origin, Version: h.Version,
				Partition: r.Partition, Offset: r.Offset,
				HeaderMetadata: h.Metadata, PayloadMetadata: r.Action.Events.Metadata, Headers: r.Headers,
			})
		}
	}
	if len(records) == 0 {
		return nil
	}
	last := b.Records[len(b.Records)-1]
	var expiry *Expiry
	if s := last.Action.Events.Metadata.ExpireAfter; s != "" {
		d, err := ParseExpireAfter(s)
		if err != nil {
			return err
		}
		expiry = &Expiry{After: d, On: expireOn(d, a.now)}
	}
	seqNr := records[len(records)-1].Event.SeqNr
	head := a.head
	if !a.has {
		id, err := NewRecordID()
		if err != nil {
			return err
		}
		head = Head{SegmentSize: DefaultSegmentSize, DeleteTo: records[0].Event.SeqNr - 1, RecordID: id, MetaSegment: MetaSegment(a.key.ID, MetaSegments)}
	}
	head.Expiry = expiry
	head.Partition, head.Offset, head.SeqNr = a.partition, b.Offset, seqNr
	if err := a.insert(ctx, head, records); err != nil {
		return err
	}
	var err error
	if a.has {
		err = a.t.UpdateHead(ctx, a.key, head, a.now)
	} else {
		err = a.t.InsertHead(ctx, a.key, head, a.now, b.Records[0].Action.Header.Origin)
	}
	if err != nil {
		return err
	}
	a.head, a.has = head, true
	return nil
}

// insert stores records segment by segment.
func (a *applier) insert(ctx context.Context, head Head, records []Record) error {
	start := 0
	for i := 1; i <= len(records); i++ {
		seg := JournalSegment(records[start].Event.SeqNr, head.SegmentSize)
		if i < len(records) && JournalSegment(records[i].Event.SeqNr, head.SegmentSize) == seg {
			continue
		}
		if err := a.t.InsertRecords(ctx, a.key, seg, head.RecordID, records[start:i]); err != nil {
			return err
		}
		start = i
	}
	return nil
}

func (a *applier) delete(ctx context.Context, b Batch) error {
	if !a.has {
		head := Head{Partition: a.partition, Offset: b.Offset, SegmentSize: DefaultSegmentSize, SeqNr: b.DeleteTo, DeleteTo: b.DeleteTo,
			MetaSegment: MetaSegment(a.key.ID, MetaSegments)}
		if err := a.t.InsertHead(ctx, a.key, head, a.now, b.Origin); err != nil {
			return err
		}
		a.head, a.has = head, true
		return nil
	}
	if b.Offset <= a.head.Offset {
		return nil
	}
	old := a.head
	head := old
	head.SeqNr = max(old.SeqNr, old.DeleteTo)
	head.DeleteTo = min(b.DeleteTo, head.SeqNr)
	head.Partition, head.Offset = a.partition, b.Offset
	if err := a.t.UpdateHead(ctx, a.key, head, a.now); err != nil {
		return err
	}
	from, to := old.DeleteTo+1, min(b.DeleteTo, old.SeqNr)
	if from <= to {
		first, last := JournalSegment(from, old.SegmentSize), JournalSegment(to, old.SegmentSize)
		for seg := first; seg <= last; seg++ {
			upTo := int64(-1)
			if seg == last && to < old.SeqNr {
				upTo = to
			}
			if err := a.t.DeleteRecords(ctx, a.key, seg, upTo); err != nil {
				return err
			}
		}
	}
	a.head = head
	return nil
}

func (a *applier) purge(ctx context.Context, b Batch) error {
	if !a.has || b.Offset < a.head.Offset {
		return nil
	}
	head := a.head
	var from, to int64
	switch {
	case head.DeleteTo < head.SeqNr:
		from, to = max(head.DeleteTo, 1), head.SeqNr
		head.DeleteTo = head.SeqNr
	case head.DeleteTo == head.SeqNr:
		from, to = head.SeqNr, head.SeqNr
	default:
		from, to = head.SeqNr, head.DeleteTo
		head.SeqNr = head.DeleteTo
	}
	// The head is updated first (at its old offset), so that a purge cut
	// short is applied again whole.
	if head != a.head {
		if err := a.t.UpdateHead(ctx, a.key, head, a.now); err != nil {
			return err
		}
	}
	first, last := max(JournalSegment(from, head.SegmentSize)-1, 0), JournalSegment(to, head.SegmentSize)+1
	for seg := first; seg <= last; seg++ {
		if err := a.t.DeleteRecords(ctx, a.key, seg, -1); err != nil {
			return err
		}
	}
	if err := a.t.DeleteHead(ctx, a.key); err != nil {
		return err
	}
	a.head, a.has = Head{}, false
	return nil
}
