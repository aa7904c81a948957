package kafka

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"
)

// Record headers Annals adds to its Append records, beside the action.
// Readers that do not know them (the Scala library) keep them as the
// record's headers and ignore them.
const (
	// timestampsHeader holds the events' timestamps in Unix microseconds
	// (Kafka's record timestamp has only milliseconds): one decimal number
	// when all are equal, else the first sequence number, a colon, and
	// one number per event separated by commas.
	timestampsHeader = "annals.timestamps"
	// metadataHeader holds the events' metadata, when any has some: a JSON
	// object from sequence number to base64 bytes.
	metadataHeader = "annals.metadata"
)

// Manifests given to events the Scala library's Journals API wrote (not
// its persistence adapter), whose payload carries no serializer:
// binary payloads get serialization.BytesID and no manifest, JSON
// payloads serialization.JSONID and no manifest, text payloads
// serialization.BytesID and TextManifest, events without a payload
// serialization.BytesID, NoPayloadManifest and an empty payload.
const (
	TextManifest      = "kafka-journal:text"
	NoPayloadManifest = "kafka-journal:none"
)

// encodeAppend returns the value and headers of the Append record of w,
// with Annals' events in the Scala persistence adapter's binary form.
// Events without a timestamp get now's.
func encodeAppend(w journal.AtomicWrite, origin string, expireAfter time.Duration, now time.Time) (value []byte, headers map[string][]byte, err error) {
	es := wire.Events{Events: make([]wire.Event, len(w.Events))}
	if expireAfter > 0 {
		es.Metadata.ExpireAfter = eventual.FormatExpireAfter(expireAfter)
	}
	var stamps []string
	sameStamp := true
	var meta map[string]string // only when an event has metadata
	for i, e := range w.Events {
		es.Events[i] = wire.Event{SeqNr: e.SequenceNr, Tags: e.Tags, Payload: &wire.Payload{Type: wire.Binary,
			Data: wire.EncodePersistentBinary(wire.Persistent{WriterUUID: e.WriterID, SerializerID: e.SerializerID, Manifest: e.Manifest, Payload: e.Payload})}}
		ts := e.Timestamp
		if ts.IsZero() {
			ts = now
		}
		stamps = append(stamps, strconv.FormatInt(ts.UnixMicro(), 10))
		sameStamp = sameStamp && stamps[i] == stamps[0]
		if e.Metadata != nil {
			if meta == nil {
				meta = map[string]string{}
			}
			meta[strconv.FormatInt(e.SequenceNr, 10)] = base64.StdEncoding.EncodeToString(e.Metadata)
		}
	}
	if value, err = wire.EncodeBinary(es); err != nil {
		return nil, nil, err
	}
	header, err := wire.EncodeHeader(wire.Header{Kind: wire.Append, From: w.Events[0].SequenceNr, To: w.Events[len(w.Events)-1].SequenceNr,
		PayloadType: wire.Binary, Origin: origin, Version: Version})
	if err != nil {
		return nil, nil, err
	}
	headers = map[string][]byte{wire.HeaderKey: header}
	if sameStamp {
		headers[timestampsHeader] = []byte(stamps[0])
	} else {
		headers[timestampsHeader] = fmt.Appendf(nil, "%d:%s", w.Events[0].SequenceNr, strings.Join(stamps, ","))
	}
	if len(meta) > 0 {
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, nil, err
		}
		headers[metadataHeader] = b
	}
	return value, headers, nil
}

// toRepr returns the Annals event of a replicated or head record.
func toRepr(pid string, r eventual.Record) (journal.Repr, error) {
	e := journal.Repr{PersistenceID: pid, SequenceNr: r.Event.SeqNr, Tags: r.Event.Tags, Timestamp: r.Timestamp.UTC(),
		Slice: annals.Slice(pid), EntityType: annals.EntityType(pid)}
	if len(e.Tags) == 0 {
		e.Tags = nil
	}
	if err := payloadOf(&e, r.Event.Payload); err != nil {
		return journal.Repr{}, fmt.Errorf("kafka journal: %q event %d (partition %d, offset %d): %w", pid, e.SequenceNr, r.Partition, r.Offset, err)
	}
	if s, ok := r.Headers[timestampsHeader]; ok {
		if us, ok := timestampOf(s, e.SequenceNr); ok {
			e.Timestamp = time.UnixMicro(us).UTC()
		}
	}
	if s, ok := r.Headers[metadataHeader]; ok {
		var meta map[string]string
		if err := json.Unmarshal([]byte(s), &meta); err != nil {
			return journal.Repr{}, fmt.Errorf("kafka journal: %q event %d: %s header: %w", pid, e.SequenceNr, metadataHeader, err)
		}
		if m, ok := meta[strconv.FormatInt(e.SequenceNr, 10)]; ok {
			b, err := base64.StdEncoding.DecodeString(m)
			if err != nil {
				return journal.Repr{}, fmt.Errorf("kafka journal: %q event %d: %s header: %w", pid, e.SequenceNr, metadataHeader, err)
			}
			e.Metadata = b
		}
	}
	return e, nil
}

// timestampOf reads event seq's timestamp from a timestamps header.
func timestampOf(h string, seq int64) (int64, bool) {
	first, list, many := strings.Cut(h, ":")
	if !many {
		us, err := strconv.ParseInt(h, 10, 64)
		return us, err == nil
	}
	f, err := strconv.ParseInt(first, 10, 64)
	stamps := strings.Split(list, ",")
	if i := seq - f; err != nil || i < 0 || i >= int64(len(stamps)) {
		return 0, false
	}
	us, err := strconv.ParseInt(stamps[seq-f], 10, 64)
	return us, err == nil
}

// payloadOf fills e's payload, serializer, manifest and writer from an
// event's payload.
func payloadOf(e *journal.Repr, p *wire.Payload) error {
	if p == nil {
		e.Payload, e.SerializerID, e.Manifest = []byte{}, serialization.BytesID, NoPayloadManifest
		return nil
	}
	switch p.Type {
	case wire.Binary:
		if pb, ok := wire.DecodePersistentBinary(p.Data); ok {
			e.Payload, e.SerializerID, e.Manifest, e.WriterID = pb.Payload, pb.SerializerID, pb.Manifest, pb.WriterUUID
			return nil
		}
		e.Payload, e.SerializerID = p.Data, serialization.BytesID
	case wire.JSON:
		if pj, ok := wire.DecodePersistentJSON(p.Data); ok {
			e.WriterID, e.Manifest = pj.WriterUUID, pj.Manifest
			if pj.PayloadType == wire.Text {
				var s string
				if err := json.Unmarshal(pj.Payload, &s); err != nil {
					return fmt.Errorf("text payload: %w", err)
				}
				e.Payload, e.SerializerID, e.Manifest = []byte(s), serialization.BytesID, TextManifest
				return nil
			}
			e.Payload, e.SerializerID = pj.Payload, serialization.JSONID
			return nil
		}
		e.Payload, e.SerializerID = p.Data, serialization.JSONID
	case wire.Text:
		e.Payload, e.SerializerID, e.Manifest = p.Data, serialization.BytesID, TextManifest
	default:
		return fmt.Errorf("payload type %q", p.Type)
	}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	return nil
}
