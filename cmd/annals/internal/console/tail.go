package console

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/query"
)

// tailEvent is one event the live tail sends.
type tailEvent struct {
	Offset        string    `json:"offset"`
	PersistenceID string    `json:"persistence_id"`
	SequenceNr    int64     `json:"sequence_nr"`
	Timestamp     time.Time `json:"timestamp"`
	EntityType    string    `json:"entity_type"`
	Slice         int       `json:"slice"`
	Tags          []string  `json:"tags"`
	SerializerID  int32     `json:"serializer_id"`
	Manifest      string    `json:"manifest"`
	Payload       Payload   `json:"payload"`
}

type tailData struct {
	Types  []string `json:"entity_types"`
	By     string   `json:"by"`
	Type   string   `json:"type"`
	Slices string   `json:"slices"`
	Tag    string   `json:"tag"`
	ID     string   `json:"id"`
	From   string   `json:"from"`
	// Stream is the /api/tail address the page's script follows; empty
	// until the form names what to follow.
	Stream string `json:"stream"`
}

func (s *Server) tailPage(r *http.Request) (any, error) {
	d := tailData{By: param(r, "by"), Type: param(r, "type"), Slices: param(r, "slices"), Tag: param(r, "tag"), ID: param(r, "id"), From: param(r, "from")}
	if d.Slices == "" {
		d.Slices = fmt.Sprintf("0-%d", annals.NumberOfSlices-1)
	}
	if d.From == "" {
		d.From = "now"
	}
	if st, err := s.figures.storeStats(r.Context()); err == nil {
		for _, t := range st.Types {
			d.Types = append(d.Types, t.EntityType)
		}
	}
	if d.By == "" {
		d.By = "type"
	}
	if _, err := s.tailSource(r, d, false); err == nil {
		d.Stream = link("/api/tail", "by", d.By, "type", d.Type, "slices", d.Slices, "tag", d.Tag, "id", d.ID, "from", d.From)
	} else if d.Type != "" || d.Tag != "" || d.ID != "" {
		return nil, err
	}
	return d, nil
}

// source is what the tail follows.
type source struct {
	what    string
	current func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error]
	live    func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope]
	byID    bool
}

// tailSource checks the parameters and returns what they select.
func (s *Server) tailSource(r *http.Request, d tailData, _ bool) (*source, error) {
	switch d.By {
	case "type":
		if d.Type == "" {
			return nil, badRequest("give an entity type")
		}
		rg, ok := sliceRange(d.Slices)
		if !ok {
			return nil, badRequest("slices %q: want MIN-MAX within 0-%d", d.Slices, annals.NumberOfSlices-1)
		}
		q, ok := s.st.Queries.(query.EventsBySlicesQuery)
		if !ok {
			return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("the %s store cannot follow events by entity type and slices; follow a tag or an id", s.st.Kind)}
		}
		return &source{
			what: fmt.Sprintf("events of %s in slices %d-%d", d.Type, rg.Min, rg.Max),
			current: func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
				return q.CurrentEventsBySlices(ctx, d.Type, rg.Min, rg.Max, after)
			},
			live: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
				return q.EventsBySlices(ctx, d.Type, rg.Min, rg.Max, after)
			},
		}, nil
	case "tag":
		if d.Tag == "" {
			return nil, badRequest("give a tag")
		}
		q, ok := s.st.Queries.(query.EventsByTagQuery)
		if !ok {
			return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("the %s store cannot follow events by tag", s.st.Kind)}
		}
		return &source{
			what: fmt.Sprintf("events tagged %q", d.Tag),
			current: func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
				return q.CurrentEventsByTag(ctx, d.Tag, after)
			},
			live: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
				return q.EventsByTag(ctx, d.Tag, after)
			},
		}, nil
	case "id":
		if d.ID == "" {
			return nil, badRequest("give a persistence id")
		}
		q, ok := s.st.Queries.(query.EventsByPersistenceIDQuery)
		if !ok {
			return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("the %s store cannot follow one id's events", s.st.Kind)}
		}
		return &source{
			what: fmt.Sprintf("events of %q", d.ID), byID: true,
			live: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
				return q.EventsByPersistenceID(ctx, d.ID, after.Sequence+1, math64)
			},
		}, nil
	}
	return nil, badRequest("by %q: want type, tag or id", d.By)
}

const math64 = 1<<63 - 1

// tailHeartbeat is how often an idle tail sends a comment, which keeps
// proxies from closing it.
const tailHeartbeat = 15 * time.Second

// tail streams the selected events as server-sent events: "start" first
// (what is followed, after which offset), then one "event" per event,
// whose id is its offset (a reconnecting EventSource resumes after it).
func (s *Server) tail(w http.ResponseWriter, r *http.Request) {
	d := tailData{By: param(r, "by"), Type: param(r, "type"), Slices: param(r, "slices"), Tag: param(r, "tag"), ID: param(r, "id"), From: param(r, "from")}
	if d.Slices == "" {
		d.Slices = fmt.Sprintf("0-%d", annals.NumberOfSlices-1)
	}
	src, err := s.tailSource(r, d, true)
	if err != nil {
		s.failJSON(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.failJSON(w, fmt.Errorf("the response cannot stream"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	after := query.NoOffset()
	resume := r.Header.Get("Last-Event-ID")
	if resume == "" {
		resume = param(r, "after")
	}
	switch {
	case resume != "":
		if err := parseOffset(resume, &after); err != nil {
			s.failJSON(w, badRequest("after %q: %v", resume, err))
			return
		}
	case d.From == "start":
	case src.byID:
		h, err := s.st.Journal.HighestSequenceNr(ctx, d.ID, 0)
		if err != nil {
			s.failJSON(w, err)
			return
		}
		after = query.SequenceOffset(h)
	default:
		if after, err = s.figures.startNow(ctx, src.current); err != nil {
			s.failJSON(w, err)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event, id string, v any) bool {
		b, _ := json.Marshal(v)
		if id != "" {
			fmt.Fprintf(w, "id: %s\n", id)
		}
		_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		flusher.Flush()
		return err == nil
	}
	if !send("start", "", map[string]string{"following": src.what, "after": offsetText(after)}) {
		return
	}
	events := make(chan query.Envelope)
	stream := src.live(ctx, after)
	go func() {
		defer close(events)
		for env := range stream.All() {
			select {
			case events <- env:
			case <-ctx.Done():
				return
			}
		}
	}()
	beat := time.NewTicker(tailHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": still following\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case env, ok := <-events:
			if !ok {
				if err := stream.Err(); err != nil && ctx.Err() == nil {
					send("failure", "", map[string]string{"error": err.Error()})
				}
				return
			}
			off := env.Offset
			if src.byID {
				off = query.SequenceOffset(env.SequenceNr)
			}
			ev := tailEvent{
				Offset: offsetText(off), PersistenceID: env.PersistenceID, SequenceNr: env.SequenceNr, Timestamp: env.Timestamp.UTC(),
				EntityType: env.EntityType, Slice: env.Slice, Tags: nonNil(env.Tags), SerializerID: env.SerializerID, Manifest: env.Manifest,
				Payload: s.opt.FormatPayload(env.SerializerID, env.Manifest, env.Payload),
			}
			if !send("event", ev.Offset, ev) {
				return
			}
		}
	}
}

// parseOffset reads an offset as the console prints it ({"seq":42}), or
// a bare sequence number.
func parseOffset(s string, o *query.Offset) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		*o = query.SequenceOffset(n)
		return nil
	}
	return json.Unmarshal([]byte(s), o)
}
