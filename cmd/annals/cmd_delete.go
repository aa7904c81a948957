package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/snapshot"
)

const deleteSafety = `Asks for confirmation on the terminal; without a terminal (a script, a
pipe) it refuses unless --yes is given (exit code 2). --dry-run shows what
would go and changes nothing.`

func deleteToCommand() *command {
	return &command{
		name: "delete-to", args: "ID SEQ", summary: "delete the events of an id up to a sequence number",
		help: `Deletes the events of persistence id ID with sequence numbers up to SEQ,
atomically. The id's highest sequence number is kept, so an entity never
reuses a number. Recovery then starts from a snapshot at or after the last
deleted event; without one it skips the deleted events and rebuilds the
state from the events kept alone (as Akka and Pekko do), which loses what
the deleted events did, so delete-to refuses unless --allow-uncovered is
given (for entities that do not need their history). ` + deleteSafety + `

--json prints {"persistence_id", "store", "to", "events" (how many go),
"first" and "last" (their sequence numbers, 0 when none),
"highest_sequence_nr", "kept" (events after SEQ), "snapshot_sequence_nr"
(the latest snapshot's, 0 when none), "covered" (a snapshot covers the
deleted events), "dry_run", "deleted"}.`,
		examples: []string{
			"annals delete-to --store sqlite:./annals.db 'Account|a-42' 1000 --dry-run",
			"annals delete-to 'Account|a-42' 1000 --yes",
		},
		minArgs: 2, maxArgs: 2,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			c := &deleteToCmd{}
			c.store, c.asJSON = storeFlag(fs), jsonFlag(fs)
			fs.BoolVar(&c.yes, "yes", false, "delete without asking")
			fs.BoolVar(&c.dry, "dry-run", false, "show what would be deleted; change nothing")
			fs.BoolVar(&c.uncovered, "allow-uncovered", false, "delete even when no snapshot covers the deleted events (the entity's state is then rebuilt from the events kept alone)")
			return c.run
		},
	}
}

// deleteToCmd is annals delete-to: its flags.
type deleteToCmd struct {
	store               *string
	asJSON              *bool
	yes, dry, uncovered bool
}

// deleteToReport is the --json shape of delete-to: what goes (or went).
type deleteToReport struct {
	PersistenceID string `json:"persistence_id"`
	Store         string `json:"store"`
	To            int64  `json:"to"`
	Events        int64  `json:"events"` // how many go
	First         int64  `json:"first"`  // their sequence numbers, 0 when none
	Last          int64  `json:"last"`
	Highest       int64  `json:"highest_sequence_nr"`
	Kept          int64  `json:"kept"`                 // events after To
	Snapshot      int64  `json:"snapshot_sequence_nr"` // the latest snapshot's, 0 when none
	Covered       bool   `json:"covered"`              // a snapshot covers the deleted events
	DryRun        bool   `json:"dry_run"`
	Deleted       bool   `json:"deleted"`
}

func (c *deleteToCmd) run(e *env, args []string) error {
	pid := args[0]
	to, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || to < 0 {
		return usagef("SEQ %q: want a sequence number (0 or more)", args[1])
	}
	s, err := e.open(*c.store, stores.Existing)
	if err != nil {
		return err
	}
	defer s.Close()
	out, err := c.plan(e.ctx, s, pid, to)
	if err != nil {
		return err
	}
	if out.Events == 0 || c.dry {
		return c.report(e, out)
	}
	if !out.Covered && !c.uncovered {
		return usagef("refusing: %s; take a snapshot at or after %d first, or pass --allow-uncovered if the entity does not need its history", out.coverage(), out.Last)
	}
	if err := e.confirm(fmt.Sprintf("Delete %s events of %s up to %d in %s? %s.", num(out.Events), pid, to, out.Store, out.coverage()), c.yes); err != nil {
		return err
	}
	if err := s.Journal.DeleteTo(e.ctx, pid, to); err != nil {
		return err
	}
	out.Deleted = true
	return c.report(e, out)
}

// plan reads what deleting the events of pid up to to would remove.
func (c *deleteToCmd) plan(ctx context.Context, s *stores.Store, pid string, to int64) (deleteToReport, error) {
	out := deleteToReport{PersistenceID: pid, Store: s.Kind + " " + s.Where, To: to, DryRun: c.dry}
	highest, err := s.Journal.HighestSequenceNr(ctx, pid, 0)
	if err != nil {
		return out, err
	}
	out.Highest = highest
	for r, err := range s.Journal.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			return out, err
		}
		if r.SequenceNr > to {
			out.Kept++
			continue
		}
		if out.Events == 0 {
			out.First = r.SequenceNr
		}
		out.Events, out.Last = out.Events+1, r.SequenceNr
	}
	if s.Snapshots != nil {
		snap, ok, err := s.Snapshots.Load(ctx, pid, snapshot.Latest())
		if err != nil {
			return out, err
		}
		if ok {
			out.Snapshot = snap.Metadata.SequenceNr
		}
	}
	out.Covered = out.Events == 0 || out.Snapshot >= out.Last
	return out, nil
}

// coverage says whether a snapshot covers the deleted events.
func (r deleteToReport) coverage() string {
	switch {
	case r.Covered:
		return fmt.Sprintf("the snapshot at %d covers them: recovery starts from it", r.Snapshot)
	case r.Snapshot == 0:
		return fmt.Sprintf("no snapshot covers them (%s has none): %s's state is then rebuilt from the events kept alone", r.PersistenceID, r.PersistenceID)
	}
	return fmt.Sprintf("no snapshot covers them (the latest is at %d): %s's state is then rebuilt from that snapshot and the events kept alone", r.Snapshot, r.PersistenceID)
}

func (c *deleteToCmd) report(e *env, out deleteToReport) error {
	if *c.asJSON {
		return writeJSON(e.stdout, out)
	}
	verb := "deleted"
	if !out.Deleted {
		verb = "would delete"
	}
	if out.Events == 0 {
		fmt.Fprintf(e.stdout, "nothing to delete: %q has no events up to %d in %s (highest sequence number %d)\n", out.PersistenceID, out.To, out.Store, out.Highest)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s %s events of %q in %s (sequence numbers %d–%d); %s kept; the highest sequence number stays %d;\n%s\n",
		verb, num(out.Events), out.PersistenceID, out.Store, out.First, out.Last, num(out.Kept), out.Highest, out.coverage())
	return nil
}

func deleteSnapshotsCommand() *command {
	return &command{
		name: "delete-snapshots", args: "ID", summary: "delete the snapshots of an id (all, or a range)",
		help: `Deletes the snapshots of persistence id ID with sequence numbers in
--from..--to (default: all of them). Recovery then replays events from the
youngest snapshot left, or from the start. ` + deleteSafety + `

--json prints {"persistence_id", "from", "to", "snapshots" (their
sequence numbers, youngest first), "dry_run", "deleted"}.`,
		examples: []string{
			"annals delete-snapshots --store sqlite:./annals.db 'Account|a-42' --dry-run",
			"annals delete-snapshots 'Account|a-42' --to 900 --yes",
		},
		minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			from := fs.Int64("from", 0, "lowest sequence number `SEQ` of the snapshots to delete")
			to := fs.Int64("to", math.MaxInt64, "highest sequence number `SEQ` of the snapshots to delete")
			yes := fs.Bool("yes", false, "delete without asking")
			dry := fs.Bool("dry-run", false, "show what would be deleted; change nothing")
			return func(e *env, args []string) error {
				pid := args[0]
				if *from < 0 || *to < *from {
					return usagef("want 0 ≤ --from ≤ --to")
				}
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				snaps, err := listSnapshots(e.ctx, s.Snapshots, pid, *from, *to)
				if err != nil {
					return err
				}
				out := struct {
					PersistenceID string  `json:"persistence_id"`
					From          int64   `json:"from"`
					To            int64   `json:"to"`
					Snapshots     []int64 `json:"snapshots"`
					DryRun        bool    `json:"dry_run"`
					Deleted       bool    `json:"deleted"`
				}{PersistenceID: pid, From: *from, To: *to, Snapshots: []int64{}, DryRun: *dry}
				for _, sn := range snaps {
					out.Snapshots = append(out.Snapshots, sn.Metadata.SequenceNr)
				}
				report := func() error {
					if *asJSON {
						return writeJSON(e.stdout, out)
					}
					if len(snaps) == 0 {
						fmt.Fprintf(e.stdout, "nothing to delete: %q has no snapshots in the range\n", pid)
						return nil
					}
					verb := "deleted"
					if !out.Deleted {
						verb = "would delete"
					}
					fmt.Fprintf(e.stdout, "%s %d snapshots of %q at sequence numbers %v\n", verb, len(snaps), pid, out.Snapshots)
					return nil
				}
				if len(snaps) == 0 || *dry {
					return report()
				}
				if err := e.confirm(fmt.Sprintf("Delete %d snapshots of %s?", len(snaps), pid), *yes); err != nil {
					return err
				}
				if err := s.Snapshots.DeleteMatching(e.ctx, pid, snapshot.Criteria{MinSequenceNr: *from, MaxSequenceNr: *to}); err != nil {
					return err
				}
				out.Deleted = true
				return report()
			}
		},
	}
}
