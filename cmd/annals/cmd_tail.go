package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"iter"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/query"
)

func tailCommand() *command {
	return &command{
		name: "tail", summary: "follow new events (or durable-state changes) live: of one id, by tag, or by entity type and slice range",
		help: `Prints events as they are stored: those of one persistence id (--id, after
--from-seq), those with a tag (--tag), or those of an entity type in a
slice range (--type, --slices), after an offset (--from-offset; default:
the start). It follows new events until Ctrl-C (exit code 130, as for
every command an interrupt ends) or --limit events (exit code 0);
--current stops at the events stored when it started.
Each line starts with the event's offset, so a later tail can resume with
--from-offset; payloads are shown as events shows them.

--durable follows the changes of durable state instead (entities made with
entity.NewDurableHost), by --tag or by --type: each line is an object's
state at a revision, the latest when the query reached it (a revision
replaced before it is not shown; a deleted object shows no change).

--json prints one JSON object per line, in the shape of events --json,
with "offset" set; with --durable, in the shape of state --json, with
"offset", "entity_type" and "slice".`,
		examples: []string{
			"annals tail --store sqlite:./annals.db --tag bank",
			"annals tail --id 'Account|a-42' --from-seq 100",
			"annals tail --type Account --slices 0-511 --from-offset '{\"seq\":1000}'",
			"annals tail --type Account --current --json | jq -c '{id: .persistence_id, payload}'",
			"annals tail --durable --type Profile",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			c := &tailCmd{}
			c.store, c.asJSON = storeFlag(fs), jsonFlag(fs)
			fs.StringVar(&c.id, "id", "", "events of this persistence `ID`")
			fs.Int64Var(&c.fromSeq, "from-seq", 0, "with --id: after this sequence number `N`")
			fs.StringVar(&c.tag, "tag", "", "events with this `TAG`")
			fs.StringVar(&c.entityType, "type", "", "events of this entity `TYPE`")
			fs.StringVar(&c.slices, "slices", "0-1023", "with --type: the slice range `MIN-MAX`")
			fs.StringVar(&c.from, "from-offset", "", "start after this `OFFSET`, as printed ({\"seq\":42}); default: the start")
			fs.Int64Var(&c.limit, "limit", 0, "stop after `N` events; 0: no limit")
			fs.BoolVar(&c.current, "current", false, "stop at the events stored when the command started")
			fs.BoolVar(&c.full, "full", false, "print whole payloads")
			fs.BoolVar(&c.durable, "durable", false, "follow durable-state changes (with --tag or --type)")
			return c.run
		},
	}
}

// tailCmd is annals tail: its flags, and what they select. Its --json
// lines are eventJSON.
type tailCmd struct {
	store               *string
	asJSON              *bool
	id, tag, entityType string
	fromSeq, limit      int64
	slices, from        string
	current, full       bool
	durable             bool

	r     annals.SliceRange // of --slices
	after query.Offset      // of --from-offset (or --from-seq with --id)
}

func (c *tailCmd) run(e *env, _ []string) error {
	if err := c.check(); err != nil {
		return err
	}
	s, err := e.open(*c.store, stores.Existing)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	events, what, err := c.source(ctx, s)
	if err != nil {
		return err
	}
	if c.current {
		fmt.Fprintf(e.stderr, "annals tail: %s after %s, up to now\n", what, offsetText(c.after))
	} else {
		fmt.Fprintf(e.stderr, "annals tail: following %s after %s; Ctrl-C to stop\n", what, offsetText(c.after))
	}
	return c.print(e, events)
}

// check checks the flags and parses --slices and --from-offset.
func (c *tailCmd) check() error {
	given := 0
	for _, v := range []string{c.id, c.tag, c.entityType} {
		if v != "" {
			given++
		}
	}
	if given != 1 {
		return usagef("give one of --id ID, --tag TAG or --type TYPE (with --slices)")
	}
	if c.durable && c.id != "" {
		return usagef("--durable follows changes by --tag or --type; for one id's state, run annals state ID")
	}
	if c.fromSeq < 0 {
		return usagef("--from-seq must not be negative")
	}
	r, ok := sliceRange(c.slices)
	if !ok {
		return usagef("--slices %q: want min-max within 0-%d", c.slices, annals.NumberOfSlices-1)
	}
	c.r = r
	if c.limit < 0 {
		return usagef("--limit must not be negative")
	}
	c.after = query.NoOffset()
	if c.from != "" {
		var err error
		if c.after, err = parseOffset(c.from); err != nil {
			return err
		}
	}
	return nil
}

// source returns the events the flags select, current or live, and what
// they are for people.
func (c *tailCmd) source(ctx context.Context, s *stores.Store) (iter.Seq2[query.Envelope, error], string, error) {
	if c.durable {
		return c.changes(ctx, s)
	}
	switch {
	case c.id != "":
		q, ok := s.Queries.(query.EventsByPersistenceIDQuery)
		if !ok {
			return nil, "", fmt.Errorf("the %s store has no queries by persistence id", s.Kind)
		}
		c.after = query.SequenceOffset(c.fromSeq)
		const noEnd = 1<<63 - 1
		return pick(c.current, func() iter.Seq2[query.Envelope, error] {
			return q.CurrentEventsByPersistenceID(ctx, c.id, c.fromSeq+1, noEnd)
		},
			func() *query.Stream[query.Envelope] { return q.EventsByPersistenceID(ctx, c.id, c.fromSeq+1, noEnd) }), fmt.Sprintf("events of %q", c.id), nil
	case c.tag != "":
		q, ok := s.Queries.(query.EventsByTagQuery)
		if !ok {
			return nil, "", fmt.Errorf("the %s store has no queries by tag", s.Kind)
		}
		return pick(c.current, func() iter.Seq2[query.Envelope, error] { return q.CurrentEventsByTag(ctx, c.tag, c.after) },
			func() *query.Stream[query.Envelope] { return q.EventsByTag(ctx, c.tag, c.after) }), fmt.Sprintf("events tagged %q", c.tag), nil
	}
	q, ok := s.Queries.(query.EventsBySlicesQuery)
	if !ok {
		return nil, "", fmt.Errorf("the %s store has no queries by slices", s.Kind)
	}
	r := c.r
	return pick(c.current, func() iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsBySlices(ctx, c.entityType, r.Min, r.Max, c.after)
	}, func() *query.Stream[query.Envelope] {
		return q.EventsBySlices(ctx, c.entityType, r.Min, r.Max, c.after)
	}), fmt.Sprintf("events of %s in slices %s", c.entityType, r), nil
}

// changes returns the durable-state changes the flags select.
func (c *tailCmd) changes(ctx context.Context, s *stores.Store) (iter.Seq2[query.Envelope, error], string, error) {
	if s.Durable == nil {
		return nil, "", fmt.Errorf("%s: %w", s.Where, errNoDurableState)
	}
	if c.tag != "" {
		q, ok := s.Durable.(query.DurableStateChangesByTagQuery)
		if !ok {
			return nil, "", fmt.Errorf("the %s store has no durable-state changes by tag", s.Kind)
		}
		return pick(c.current, func() iter.Seq2[query.Envelope, error] { return q.CurrentChangesByTag(ctx, c.tag, c.after) },
			func() *query.Stream[query.Envelope] { return q.ChangesByTag(ctx, c.tag, c.after) }), fmt.Sprintf("durable-state changes tagged %q", c.tag), nil
	}
	q, ok := s.Durable.(query.DurableStateChangesBySlicesQuery)
	if !ok {
		return nil, "", fmt.Errorf("the %s store has no durable-state changes by slices", s.Kind)
	}
	r := c.r
	return pick(c.current, func() iter.Seq2[query.Envelope, error] {
		return q.CurrentChangesBySlices(ctx, c.entityType, r.Min, r.Max, c.after)
	}, func() *query.Stream[query.Envelope] {
		return q.ChangesBySlices(ctx, c.entityType, r.Min, r.Max, c.after)
	}), fmt.Sprintf("durable-state changes of %s in slices %s", c.entityType, r), nil
}

// changeJSON is a line of tail --durable --json: the object's state as
// state --json shows it, with the change's offset, entity type and slice.
type changeJSON struct {
	stateJSON
	Offset     query.Offset `json:"offset"`
	EntityType string       `json:"entity_type"`
	Slice      int          `json:"slice"`
}

func toChangeJSON(env query.Envelope) changeJSON {
	j := changeJSON{stateJSON: stateJSON{PersistenceID: env.PersistenceID, Found: true, Revision: env.SequenceNr, Timestamp: env.Timestamp.UTC(),
		SerializerID: env.SerializerID, Manifest: env.Manifest, PayloadSize: len(env.Payload)}, Offset: env.Offset, EntityType: env.EntityType, Slice: env.Slice}
	if len(env.Tags) > 0 {
		j.Tag = env.Tags[0]
	}
	j.Payload, j.PayloadBase64 = payloadJSON(env.SerializerID, env.Payload)
	return j
}

// print prints events, one line each, until they end, --limit, or an
// interrupt (the normal end of a live tail).
func (c *tailCmd) print(e *env, events iter.Seq2[query.Envelope, error]) error {
	enc := json.NewEncoder(e.stdout)
	var n int64
	for env, err := range events {
		if err != nil {
			if e.ctx.Err() != nil {
				return nil // interrupted: the normal end of a live tail
			}
			return err
		}
		if *c.asJSON {
			var line any = toEventJSON(env, true)
			if c.durable {
				line = toChangeJSON(env)
			}
			if err := enc.Encode(line); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(e.stdout, "%s  %s  %d  %s  %s  %s  %s  %s\n", offsetText(env.Offset), env.PersistenceID, env.SequenceNr, timeText(env.Timestamp),
				serializerText(env.SerializerID), textOr(env.Manifest, "-"), tagsText(env.Tags), payloadText(env.SerializerID, env.Payload, c.full))
		}
		if n++; c.limit > 0 && n >= c.limit {
			return nil
		}
	}
	return nil
}

// pick returns the current query's results, or the live stream's (whose
// end by its context is not an error).
func pick(current bool, cur func() iter.Seq2[query.Envelope, error], live func() *query.Stream[query.Envelope]) iter.Seq2[query.Envelope, error] {
	if current {
		return cur()
	}
	return func(yield func(query.Envelope, error) bool) {
		s := live()
		for env := range s.All() {
			if !yield(env, nil) {
				return
			}
		}
		if err := s.Err(); err != nil {
			yield(query.Envelope{}, err)
		}
	}
}
