package query_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/query"
)

func TestOffsetJSONRoundTrip(t *testing.T) {
	ts := time.Date(2026, 11, 21, 10, 0, 0, 123456000, time.UTC)
	tests := []struct {
		name string
		in   query.Offset
		json string
	}{
		{"none", query.NoOffset(), `{}`},
		{"sequence", query.SequenceOffset(42), `{"seq":42}`},
		{"timestamp", query.TimestampOffset(ts, map[string]int64{"A|1": 3}), `{"ts":"2026-11-21T10:00:00.123456Z","seen":{"A|1":3}}`},
		{"partitions", query.PartitionsOffset(map[int32]int64{0: 7, 2: 0}, map[string]int64{"A|1": 2}), `{"seen":{"A|1":2},"partitions":{"0":7,"2":0}}`},
		{"time uuid", query.TimeUUIDOffset([16]byte{0x5e, 0x8c, 0x4a, 0x10, 0xc9, 0x1b, 0x11, 0xf0, 0x80, 0x01, 0x02, 0x42, 0xac, 0x11, 0x00, 0x02}), `{"uuid":"5e8c4a10-c91b-11f0-8001-0242ac110002"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.in)
		if err != nil || string(b) != tt.json {
			t.Errorf("%s: %s, %v; want %s", tt.name, b, err, tt.json)
			continue
		}
		var out query.Offset
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: decode: %v", tt.name, err)
		}
		if out.Kind != tt.in.Kind || out.Sequence != tt.in.Sequence || !out.Timestamp.Equal(tt.in.Timestamp) || len(out.Seen) != len(tt.in.Seen) || out.TimeUUID != tt.in.TimeUUID || !maps.Equal(out.Partitions, tt.in.Partitions) {
			t.Errorf("%s: round trip gave %+v, want %+v", tt.name, out, tt.in)
		}
	}
	var o query.Offset
	for _, bad := range []string{`{"seq":1,"ts":"2026-01-01T00:00:00Z"}`, `{"seq":"x"}`, `[]`, `null`, `{"sequence":42}`, `{"Sequence":42,"Kind":1}`, `{"seq":null}`, `{"seq":5,"seen":{"A|1":1}}`, `{"seen":{"A|1":1}}`,
		`{"uuid":"5e8c4a10-c91b-41f0-8001-0242ac110002"}`, `{"uuid":"5e8c4a10c91b11f080010242ac110002"}`, `{"uuid":"5e8c4a10-c91b-11f0-8001-0242ac11000z"}`, `{"uuid":"5e8c4a10-c91b-11f0-8001-0242ac110002","seq":1}`, `{"partitions":{"0":1},"seq":1}`, `{"partitions":{"x":1}}`} {
		if err := json.Unmarshal([]byte(bad), &o); err == nil {
			t.Errorf("decoding %s succeeded, want an error", bad)
		}
	}
}

func TestOffsetOrdering(t *testing.T) {
	if !query.NoOffset().AfterSequence(1) || !query.SequenceOffset(5).AfterSequence(6) || query.SequenceOffset(5).AfterSequence(5) {
		t.Error("sequence offsets must be exclusive")
	}
}

// TestFollowWakesOnSignal checks that a live query runs its current query
// again when the store signals a commit, and ends with ctx's error.
func TestFollowWakesOnSignal(t *testing.T) {
	var sig query.Signal
	var mu sync.Mutex
	var stored []query.Envelope
	next := 0
	current := func(context.Context) iter.Seq2[query.Envelope, error] {
		return func(yield func(query.Envelope, error) bool) {
			for {
				mu.Lock()
				if next >= len(stored) {
					mu.Unlock()
					return
				}
				env := stored[next]
				next++
				mu.Unlock()
				if !yield(env, nil) {
					return
				}
			}
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	stream := query.Follow(ctx, &sig, time.Hour, current, nil)
	got := make(chan int64)
	go func() {
		for env := range stream.All() {
			got <- env.SequenceNr
		}
		close(got)
	}()
	for i := int64(1); i <= 3; i++ {
		mu.Lock()
		stored = append(stored, query.Envelope{SequenceNr: i})
		mu.Unlock()
		sig.Notify()
		if n := <-got; n != i {
			t.Fatalf("got %d, want %d", n, i)
		}
	}
	cancel()
	<-got
	if err := stream.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("stream ended with %v, want context.Canceled", err)
	}
}
