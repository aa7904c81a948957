package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
)

func idsCommand() *command {
	return &command{
		name: "ids", summary: "list persistence ids, paged, by entity type",
		help: `Lists persistence ids in ascending order with the highest sequence number
of each (ids whose events were all deleted are listed too). Prints one
page of --limit ids; when there are more, says how to ask for the next
page (--after the last id printed).

--json prints {"ids": [{"persistence_id": "...", "highest_sequence_nr": N}],
"next_after": "ID or empty when this is the last page"}.`,
		examples: []string{
			"annals ids --store sqlite:./annals.db",
			"annals ids --type Account --limit 50 --after 'Account|a-0049'",
			"annals ids --type Account --limit 0 --json   # every id",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			c := &idsCmd{}
			c.store, c.asJSON = storeFlag(fs), jsonFlag(fs)
			fs.StringVar(&c.entityType, "type", "", "only ids of this entity `TYPE`")
			fs.StringVar(&c.after, "after", "", "start after this `ID` (the next_after of the previous page)")
			fs.IntVar(&c.limit, "limit", 100, "`N` ids per page; 0 for all")
			return c.run
		},
	}
}

// idsCmd is annals ids: its flags.
type idsCmd struct {
	store             *string
	asJSON            *bool
	entityType, after string
	limit             int
}

// idsReport is the --json shape of ids: a page of them.
type idsReport struct {
	IDs       []idEntry `json:"ids"`
	NextAfter string    `json:"next_after"` // "" on the last page
}

// idEntry is one persistence id of idsReport.
type idEntry struct {
	PersistenceID string `json:"persistence_id"`
	Highest       int64  `json:"highest_sequence_nr"`
}

func (c *idsCmd) run(e *env, _ []string) error {
	if c.limit < 0 {
		return usagef("--limit must not be negative")
	}
	s, err := e.open(*c.store, stores.Existing)
	if err != nil {
		return err
	}
	defer s.Close()
	out, err := c.page(e.ctx, s)
	if err != nil {
		return err
	}
	if *c.asJSON {
		return writeJSON(e.stdout, out)
	}
	if len(out.IDs) == 0 {
		fmt.Fprintln(e.stderr, "no persistence ids")
		return nil
	}
	tw := table(e.stdout, "PERSISTENCE ID", "HIGHEST SEQ")
	for _, id := range out.IDs {
		row(tw, id.PersistenceID, id.Highest)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.NextAfter != "" {
		fmt.Fprintf(e.stderr, "more ids: add --after '%s'\n", out.NextAfter)
	}
	return nil
}

// page lists one page of ids with their highest sequence numbers.
func (c *idsCmd) page(ctx context.Context, s *stores.Store) (idsReport, error) {
	out := idsReport{IDs: []idEntry{}}
	q, ok := s.Queries.(query.PersistenceIDsQuery)
	if !ok {
		return out, fmt.Errorf("the %s store cannot list persistence ids", s.Kind)
	}
	ask := c.limit
	if ask > 0 {
		ask++ // one more, to know whether there is a next page
	}
	ids, err := q.CurrentPersistenceIDs(ctx, c.entityType, c.after, ask)
	if err != nil {
		return out, err
	}
	if c.limit > 0 && len(ids) > c.limit {
		ids = ids[:c.limit]
		out.NextAfter = ids[len(ids)-1]
	}
	for _, id := range ids {
		h, err := s.Journal.HighestSequenceNr(ctx, id, 0)
		if err != nil {
			return out, err
		}
		out.IDs = append(out.IDs, idEntry{id, h})
	}
	return out, nil
}

func eventsCommand() *command {
	return &command{
		name: "events", args: "ID", summary: "print the events of a persistence id",
		help: `Prints the stored events of one persistence id, in sequence order: sequence
number, write timestamp, serializer and manifest, tags and payload. A
payload of the JSON serializer (id 31, or 33 as earlier versions wrote) that is valid JSON is printed as
JSON; any other payload raw: quoted when it is text, else hex (tables cut
long payloads unless --full).

--json prints one JSON object per line (JSON Lines), one per event:
{"persistence_id", "sequence_nr", "offset" (where the store has one, as
tail --from-offset takes it), "timestamp", "entity_type", "slice",
"serializer_id", "manifest", "writer_id", "tags" (a list),
"payload_size", then "payload" (the JSON) or "payload_base64", and
"metadata_base64" when the event has metadata}.`,
		examples: []string{
			"annals events --store sqlite:./annals.db 'Account|a-42'",
			"annals events 'Account|a-42' --from 100 --to 200 --full",
			"annals events 'Account|a-42' --json | jq .payload",
		},
		minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			c := &eventsCmd{}
			c.store, c.asJSON = storeFlag(fs), jsonFlag(fs)
			fs.Int64Var(&c.from, "from", 1, "first sequence number `SEQ`")
			fs.Int64Var(&c.to, "to", math.MaxInt64, "last sequence number `SEQ`")
			fs.Int64Var(&c.limit, "limit", 0, "at most `N` events; 0 for all")
			fs.BoolVar(&c.full, "full", false, "print whole payloads in the table")
			return c.run
		},
	}
}

// eventsCmd is annals events: its flags. Its --json lines are eventJSON.
type eventsCmd struct {
	store           *string
	asJSON          *bool
	from, to, limit int64
	full            bool
}

func (c *eventsCmd) run(e *env, args []string) error {
	pid := args[0]
	if c.to < 0 || c.limit < 0 {
		return usagef("--to and --limit must not be negative")
	}
	if c.from > c.to {
		return usagef("--from %d is after --to %d", c.from, c.to)
	}
	s, err := e.open(*c.store, stores.Existing)
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := c.print(e, s, pid)
	if err != nil || n > 0 {
		return err
	}
	return c.explainNone(e, s, pid)
}

// print prints the events of pid in the range, as a table or JSON lines,
// and returns how many there were.
func (c *eventsCmd) print(e *env, s *stores.Store, pid string) (int, error) {
	max := c.limit
	if max == 0 {
		max = math.MaxInt64
	}
	var tw flusher
	if !*c.asJSON {
		tw = table(e.stdout, "SEQ", "TIMESTAMP", "SERIALIZER", "MANIFEST", "TAGS", "PAYLOAD")
	}
	enc := json.NewEncoder(e.stdout)
	n := 0
	for r, err := range s.Journal.Replay(e.ctx, pid, c.from, c.to, max) {
		if err != nil {
			return n, err
		}
		n++
		env := query.FromRepr(r, query.SequenceOffset(r.Ordering))
		if *c.asJSON {
			if err := enc.Encode(toEventJSON(env, r.Ordering > 0)); err != nil {
				return n, err
			}
			continue
		}
		row(tw, r.SequenceNr, timeText(r.Timestamp), serializerText(r.SerializerID), textOr(r.Manifest, "-"), tagsText(r.Tags), payloadText(r.SerializerID, r.Payload, c.full))
		if n%1000 == 0 {
			if err := tw.Flush(); err != nil {
				return n, err
			}
		}
	}
	if tw != nil && n > 0 {
		return n, tw.Flush()
	}
	return n, nil
}

// explainNone says on stderr why pid has no events in the range.
func (c *eventsCmd) explainNone(e *env, s *stores.Store, pid string) error {
	h, err := s.Journal.HighestSequenceNr(e.ctx, pid, 0)
	if err != nil {
		return err
	}
	if h == 0 {
		fmt.Fprintf(e.stderr, "no events stored for %q\n", pid)
		if !strings.Contains(pid, annals.Separator) {
			fmt.Fprintf(e.stderr, "(%q has no %q: persistence ids are TYPE%sID, such as Account%sa-42; 'annals ids' lists them)\n", pid, annals.Separator, annals.Separator, annals.Separator)
		}
	} else {
		fmt.Fprintf(e.stderr, "no events of %q in the range (highest sequence number %d; events up to some number may have been deleted)\n", pid, h)
	}
	return nil
}

type flusher interface {
	Write([]byte) (int, error)
	Flush() error
}

// snapshotJSON is the JSON shape of one snapshot.
type snapshotJSON struct {
	SequenceNr    int64     `json:"sequence_nr"`
	Timestamp     time.Time `json:"timestamp"`
	SerializerID  int32     `json:"serializer_id"`
	Manifest      string    `json:"manifest"`
	PayloadSize   int       `json:"payload_size"`
	Payload       any       `json:"payload,omitempty"`
	PayloadBase64 []byte    `json:"payload_base64,omitempty"`
}

// listSnapshots returns the snapshots of pid with sequence numbers in
// from..to, youngest first, walking down with Load: a snapshot store
// returns the youngest match of its criteria.
func listSnapshots(ctx context.Context, ss snapshot.Store, pid string, from, to int64) ([]snapshot.Snapshot, error) {
	var out []snapshot.Snapshot
	for to >= from {
		snap, ok, err := ss.Load(ctx, pid, snapshot.Criteria{MinSequenceNr: from, MaxSequenceNr: to})
		if err != nil || !ok {
			return out, err
		}
		out = append(out, snap)
		to = snap.Metadata.SequenceNr - 1
	}
	return out, nil
}

func snapshotsCommand() *command {
	return &command{
		name: "snapshots", args: "ID", summary: "list the snapshots of a persistence id",
		help: `Lists the snapshots of one persistence id, youngest first: sequence number,
timestamp, serializer and manifest, size and payload (shown as events
shows payloads).

--json prints {"persistence_id": "...", "snapshots": [{"sequence_nr",
"timestamp", "serializer_id", "manifest", "payload_size", "payload" or
"payload_base64"}]}.`,
		examples: []string{
			"annals snapshots --store sqlite:./annals.db 'Account|a-42'",
			"annals snapshots 'Account|a-42' --json",
		},
		minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			full := fs.Bool("full", false, "print whole payloads in the table")
			return func(e *env, args []string) error {
				pid := args[0]
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				snaps, err := listSnapshots(e.ctx, s.Snapshots, pid, 0, math.MaxInt64)
				if err != nil {
					return err
				}
				if *asJSON {
					out := struct {
						PersistenceID string         `json:"persistence_id"`
						Snapshots     []snapshotJSON `json:"snapshots"`
					}{pid, []snapshotJSON{}}
					for _, sn := range snaps {
						j := snapshotJSON{SequenceNr: sn.Metadata.SequenceNr, Timestamp: sn.Metadata.Timestamp.UTC(), SerializerID: sn.SerializerID, Manifest: sn.Manifest, PayloadSize: len(sn.Payload)}
						j.Payload, j.PayloadBase64 = payloadJSON(sn.SerializerID, sn.Payload)
						out.Snapshots = append(out.Snapshots, j)
					}
					return writeJSON(e.stdout, out)
				}
				if len(snaps) == 0 {
					fmt.Fprintf(e.stderr, "no snapshots of %q\n", pid)
					return nil
				}
				tw := table(e.stdout, "SEQ", "TIMESTAMP", "SERIALIZER", "MANIFEST", "SIZE", "PAYLOAD")
				for _, sn := range snaps {
					row(tw, sn.Metadata.SequenceNr, timeText(sn.Metadata.Timestamp), serializerText(sn.SerializerID), textOr(sn.Manifest, "-"), bytesText(int64(len(sn.Payload))), payloadText(sn.SerializerID, sn.Payload, *full))
				}
				return tw.Flush()
			}
		},
	}
}

// typeStatsJSON is the JSON shape of the figures of an entity type.
type typeStatsJSON struct {
	EntityType     string   `json:"entity_type,omitempty"`
	PersistenceIDs int64    `json:"persistence_ids"`
	Events         int64    `json:"events"`
	PayloadBytes   int64    `json:"payload_bytes"`
	Highest        int64    `json:"highest_sequence_nr"`
	Oldest         jsonTime `json:"oldest_event"`
	Newest         jsonTime `json:"newest_event"`
	Snapshots      int64    `json:"snapshots"`
	SnapshotBytes  int64    `json:"snapshot_bytes"`
}

func toTypeStatsJSON(t admin.TypeStats) typeStatsJSON {
	return typeStatsJSON{t.EntityType, t.PersistenceIDs, t.Events, t.PayloadBytes, t.HighestSequenceNr, jsonTime(t.Oldest), jsonTime(t.Newest), t.Snapshots, t.SnapshotBytes}
}

// totalStats sums the figures of every type.
func totalStats(ts []admin.TypeStats) admin.TypeStats {
	var sum admin.TypeStats
	for _, t := range ts {
		sum.Add(t)
	}
	return sum
}

func statsCommand() *command {
	return &command{
		name: "stats", summary: "counts, sizes, highest numbers, oldest and newest events, per entity type",
		help: `Prints, per entity type and in total: persistence ids, stored events, their
payload bytes, the highest sequence number, the oldest and newest event's
write time, snapshots and their bytes; and the space the store takes.

--json prints {"entity_types": [{"entity_type", "persistence_ids",
"events", "payload_bytes", "highest_sequence_nr", "oldest_event",
"newest_event" (null when none), "snapshots", "snapshot_bytes"}],
"total": {the same without entity_type}, "storage_bytes": N (0 when
unknown)}.`,
		examples: []string{
			"annals stats --store sqlite:./annals.db",
			"annals stats --json | jq '.total.events'",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			return func(e *env, _ []string) error {
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				sr, ok := s.Admin.(admin.StatsReader)
				if !ok {
					return fmt.Errorf("the %s store does not report statistics", s.Kind)
				}
				st, err := sr.Stats(e.ctx)
				if err != nil {
					return err
				}
				total := totalStats(st.EntityTypes)
				if *asJSON {
					out := struct {
						Types        []typeStatsJSON `json:"entity_types"`
						Total        typeStatsJSON   `json:"total"`
						StorageBytes int64           `json:"storage_bytes"`
					}{[]typeStatsJSON{}, toTypeStatsJSON(total), st.StorageBytes}
					for _, t := range st.EntityTypes {
						out.Types = append(out.Types, toTypeStatsJSON(t))
					}
					return writeJSON(e.stdout, out)
				}
				tw := table(e.stdout, "ENTITY TYPE", "IDS", "EVENTS", "PAYLOAD", "HIGHEST SEQ", "OLDEST EVENT", "NEWEST EVENT", "SNAPSHOTS", "SNAPSHOT SIZE")
				line := func(name string, t admin.TypeStats) {
					row(tw, name, num(t.PersistenceIDs), num(t.Events), bytesText(t.PayloadBytes), t.HighestSequenceNr, timeText(t.Oldest), timeText(t.Newest), num(t.Snapshots), bytesText(t.SnapshotBytes))
				}
				for _, t := range st.EntityTypes {
					line(t.EntityType, t)
				}
				line("(total)", total)
				if err := tw.Flush(); err != nil {
					return err
				}
				if st.StorageBytes > 0 {
					fmt.Fprintf(e.stdout, "\nstorage: %s (%s)\n", bytesText(st.StorageBytes), s.Where)
				}
				return nil
			}
		},
	}
}
