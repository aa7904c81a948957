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
		name: "tail", summary: "follow new events live: of one id, by tag, or by entity type and slice range",
		help: `Prints events as they are stored: those of one persistence id (--id, after
--from-seq), those with a tag (--tag), or those of an entity type in a
slice range (--type, --slices), after an offset (--from-offset; default:
the start). It follows new events until Ctrl-C
or --limit events; --current stops at the events stored when it started.
Each line starts with the event's offset, so a later tail can resume with
--from-offset; payloads are shown as events shows them.

--json prints one JSON object per line, in the shape of events --json,
with "offset" set.`,
		examples: []string{
			"annals tail --store sqlite:./annals.db --tag bank",
			"annals tail --id 'Account|a-42' --from-seq 100",
			"annals tail --type Account --slices 0-511 --from-offset '{\"seq\":1000}'",
			"annals tail --type Account --current --json | jq -c '{id: .persistence_id, payload}'",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			id := fs.String("id", "", "events of this persistence `ID`")
			fromSeq := fs.Int64("from-seq", 0, "with --id: after this sequence number `N`")
			tag := fs.String("tag", "", "events with this `TAG`")
			typ := fs.String("type", "", "events of this entity `TYPE`")
			slices := fs.String("slices", "0-1023", "with --type: the slice range `MIN-MAX`")
			from := fs.String("from-offset", "", "start after this `OFFSET`, as printed ({\"seq\":42}); default: the start")
			limit := fs.Int64("limit", 0, "stop after `N` events; 0: no limit")
			current := fs.Bool("current", false, "stop at the events stored when the command started")
			full := fs.Bool("full", false, "print whole payloads")
			return func(e *env, _ []string) error {
				given := 0
				for _, v := range []string{*id, *tag, *typ} {
					if v != "" {
						given++
					}
				}
				if given != 1 {
					return usagef("give one of --id ID, --tag TAG or --type TYPE (with --slices)")
				}
				if *fromSeq < 0 {
					return usagef("--from-seq must not be negative")
				}
				r, ok := sliceRange(*slices)
				if !ok {
					return usagef("--slices %q: want min-max within 0-%d", *slices, annals.NumberOfSlices-1)
				}
				if *limit < 0 {
					return usagef("--limit must not be negative")
				}
				after := query.NoOffset()
				if *from != "" {
					var err error
					if after, err = parseOffset(*from); err != nil {
						return err
					}
				}
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				ctx, cancel := context.WithCancel(e.ctx)
				defer cancel()
				var events iter.Seq2[query.Envelope, error]
				what := ""
				if *id != "" {
					q, ok := s.Queries.(query.EventsByPersistenceIDQuery)
					if !ok {
						return fmt.Errorf("the %s store has no queries by persistence id", s.Kind)
					}
					what = fmt.Sprintf("events of %q", *id)
					after = query.SequenceOffset(*fromSeq)
					const noEnd = 1<<63 - 1
					events = pick(*current, func() iter.Seq2[query.Envelope, error] {
						return q.CurrentEventsByPersistenceID(ctx, *id, *fromSeq+1, noEnd)
					},
						func() *query.Stream[query.Envelope] { return q.EventsByPersistenceID(ctx, *id, *fromSeq+1, noEnd) })
				} else if *tag != "" {
					q, ok := s.Queries.(query.EventsByTagQuery)
					if !ok {
						return fmt.Errorf("the %s store has no queries by tag", s.Kind)
					}
					what = fmt.Sprintf("events tagged %q", *tag)
					events = pick(*current, func() iter.Seq2[query.Envelope, error] { return q.CurrentEventsByTag(ctx, *tag, after) },
						func() *query.Stream[query.Envelope] { return q.EventsByTag(ctx, *tag, after) })
				} else {
					q, ok := s.Queries.(query.EventsBySlicesQuery)
					if !ok {
						return fmt.Errorf("the %s store has no queries by slices", s.Kind)
					}
					what = fmt.Sprintf("events of %s in slices %s", *typ, r)
					events = pick(*current, func() iter.Seq2[query.Envelope, error] {
						return q.CurrentEventsBySlices(ctx, *typ, r.Min, r.Max, after)
					}, func() *query.Stream[query.Envelope] { return q.EventsBySlices(ctx, *typ, r.Min, r.Max, after) })
				}
				if *current {
					fmt.Fprintf(e.stderr, "annals tail: %s after %s, up to now\n", what, offsetText(after))
				} else {
					fmt.Fprintf(e.stderr, "annals tail: following %s after %s; Ctrl-C to stop\n", what, offsetText(after))
				}
				enc := json.NewEncoder(e.stdout)
				var n int64
				for env, err := range events {
					if err != nil {
						if e.ctx.Err() != nil {
							return nil // interrupted: the normal end of a live tail
						}
						return err
					}
					if *asJSON {
						if err := enc.Encode(toEventJSON(env, true)); err != nil {
							return err
						}
					} else {
						fmt.Fprintf(e.stdout, "%s  %s  %d  %s  %s  %s  %s  %s\n", offsetText(env.Offset), env.PersistenceID, env.SequenceNr, timeText(env.Timestamp),
							serializerText(env.SerializerID), textOr(env.Manifest, "-"), tagsText(env.Tags), payloadText(env.SerializerID, env.Payload, *full))
					}
					if n++; *limit > 0 && n >= *limit {
						return nil
					}
				}
				return nil
			}
		},
	}
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
