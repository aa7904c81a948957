package cassandra

import (
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
)

// TestHandoffs: the events a recovery's repair read are taken once by the
// replay that follows, within handoffTTL; a later handoff of the id
// replaces the earlier, a deletion drops it, and handoffs beyond
// maxHandoffBytes over all ids are not kept. The bytes kept return to 0.
func TestHandoffs(t *testing.T) {
	events := func(n int, size int) []storedEvent {
		out := make([]storedEvent, n)
		for i := range out {
			out[i].repr = journal.Repr{SequenceNr: int64(i + 1), Payload: make([]byte, size)}
		}
		return out
	}
	handoffOf := func(n, size int) *handoff {
		h := &handoff{from: 1, to: int64(n), events: events(n, size)}
		for i := range h.events {
			h.bytes += eventBytes(&h.events[i].repr)
		}
		return h
	}
	tests := []struct {
		name string
		// run keeps and drops handoffs, and returns what the replay of
		// "id" takes.
		run      func(tw *tagWriters) *handoff
		wantFrom int64 // 0: nothing taken
		wantN    int
	}{
		{name: "kept and taken", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("id", handoffOf(3, 10))
			return tw.takeHandoff("id")
		}, wantFrom: 1, wantN: 3},
		{name: "taken once", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("id", handoffOf(3, 10))
			tw.takeHandoff("id")
			return tw.takeHandoff("id")
		}},
		{name: "another id's", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("other", handoffOf(3, 10))
			return tw.takeHandoff("id")
		}},
		{name: "replaced by a later repair", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("id", handoffOf(3, 10))
			tw.keepHandoff("id", handoffOf(5, 10))
			return tw.takeHandoff("id")
		}, wantFrom: 1, wantN: 5},
		{name: "dropped by a deletion", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("id", handoffOf(3, 10))
			tw.dropHandoff("id")
			return tw.takeHandoff("id")
		}},
		{name: "expired", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("id", handoffOf(3, 10))
			tw.handoffs["id"].expires = time.Now().Add(-time.Second)
			return tw.takeHandoff("id")
		}},
		{name: "expired ones swept", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("id", handoffOf(3, 10))
			tw.keepHandoff("other", handoffOf(3, 10))
			tw.handoffs["other"].expires = time.Now().Add(-time.Second)
			tw.dropExpiredHandoffs()
			if _, ok := tw.handoffs["other"]; ok {
				t.Error("an expired handoff was kept by the sweep")
			}
			return tw.takeHandoff("id")
		}, wantFrom: 1, wantN: 3},
		{name: "over the budget with another id's", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("other", handoffOf(1, maxHandoffBytes/2))
			tw.keepHandoff("id", handoffOf(1, maxHandoffBytes/2))
			return tw.takeHandoff("id")
		}},
		{name: "over the budget alone", run: func(tw *tagWriters) *handoff {
			tw.keepHandoff("id", handoffOf(1, maxHandoffBytes))
			return tw.takeHandoff("id")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tw := &tagWriters{handoffs: map[string]*handoff{}}
			h := tt.run(tw)
			switch {
			case tt.wantFrom == 0 && h != nil:
				t.Errorf("took a handoff of %d events, want none", len(h.events))
			case tt.wantFrom != 0 && (h == nil || h.from != tt.wantFrom || len(h.events) != tt.wantN):
				t.Errorf("took %+v, want %d events from %d", h, tt.wantN, tt.wantFrom)
			}
			for pid := range tw.handoffs {
				tw.dropHandoff(pid)
			}
			if tw.handoffBytes != 0 {
				t.Errorf("%d bytes accounted after every handoff was taken or dropped, want 0", tw.handoffBytes)
			}
		})
	}
}
