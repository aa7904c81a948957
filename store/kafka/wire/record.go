package wire

import (
	"fmt"
	"time"
)

// Record is a Kafka record as a consumer gives it: where it is, its key,
// its headers, its value and its timestamp.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Headers   map[string][]byte
	Value     []byte
}

// Action is a decoded record: its key (the persistence id), its header,
// and for an Append its events.
type Action struct {
	ID     string
	Header Header
	Events Events
}

// RecordError reports a record that is not a valid action, naming where
// it is. It wraps ErrMalformed.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("kafka journal: record %s/%d@%d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the cause, which wraps ErrMalformed.
func (e *RecordError) Unwrap() error { return e.Err }

// DecodeRecord reads a record of a journal topic. It reports ok false for
// a record to skip: one without a key or without the action header, or
// whose header holds an action this version does not know. A record whose
// header or value cannot be read is a *RecordError.
func DecodeRecord(r Record) (a Action, ok bool, err error) {
	fail := func(err error) (Action, bool, error) {
		return Action{}, false, &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
	}
	raw, has := r.Headers[HeaderKey]
	if len(r.Key) == 0 || !has {
		return Action{}, false, nil
	}
	h, known, err := DecodeHeader(raw)
	if err != nil {
		return fail(err)
	}
	if !known {
		return Action{}, false, nil
	}
	a = Action{ID: string(r.Key), Header: h}
	if h.Kind != Append {
		return a, true, nil
	}
	if len(r.Value) == 0 {
		return fail(fmt.Errorf("%w: an append without a value", ErrMalformed))
	}
	if h.PayloadType == Binary {
		a.Events, err = DecodeBinary(r.Value)
	} else {
		a.Events, err = DecodeJSON(r.Value)
	}
	if err != nil {
		return fail(err)
	}
	n := len(a.Events.Events)
	if n == 0 || a.Events.Events[0].SeqNr != h.From || a.Events.Events[n-1].SeqNr != h.To {
		return fail(fmt.Errorf("%w: the events do not span the header's range %d..%d", ErrMalformed, h.From, h.To))
	}
	return a, true, nil
}
