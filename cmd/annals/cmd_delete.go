package main

import (
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
reuses a number. Recovery then needs a snapshot at or after the last
deleted event to rebuild the state: without one, the entity can no longer
recover, so delete-to refuses unless --allow-uncovered is given (for
entities that recover without their history). ` + deleteSafety + `

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
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			yes := fs.Bool("yes", false, "delete without asking")
			dry := fs.Bool("dry-run", false, "show what would be deleted; change nothing")
			uncovered := fs.Bool("allow-uncovered", false, "delete even when no snapshot covers the deleted events (the entity can then not recover its state)")
			return func(e *env, args []string) error {
				pid := args[0]
				to, err := strconv.ParseInt(args[1], 10, 64)
				if err != nil || to < 0 {
					return usagef("SEQ %q: want a sequence number (0 or more)", args[1])
				}
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				highest, err := s.Journal.HighestSequenceNr(e.ctx, pid, 0)
				if err != nil {
					return err
				}
				var n, first, last, kept int64
				for r, err := range s.Journal.Replay(e.ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
					if err != nil {
						return err
					}
					if r.SequenceNr > to {
						kept++
						continue
					}
					if n == 0 {
						first = r.SequenceNr
					}
					n, last = n+1, r.SequenceNr
				}
				var snapSeq int64
				if s.Snapshots != nil {
					snap, ok, err := s.Snapshots.Load(e.ctx, pid, snapshot.Latest())
					if err != nil {
						return err
					}
					if ok {
						snapSeq = snap.Metadata.SequenceNr
					}
				}
				covered := n == 0 || snapSeq >= last
				where := s.Kind + " " + s.Where
				out := struct {
					PersistenceID string `json:"persistence_id"`
					Store         string `json:"store"`
					To            int64  `json:"to"`
					Events        int64  `json:"events"`
					First         int64  `json:"first"`
					Last          int64  `json:"last"`
					Highest       int64  `json:"highest_sequence_nr"`
					Kept          int64  `json:"kept"`
					Snapshot      int64  `json:"snapshot_sequence_nr"`
					Covered       bool   `json:"covered"`
					DryRun        bool   `json:"dry_run"`
					Deleted       bool   `json:"deleted"`
				}{pid, where, to, n, first, last, highest, kept, snapSeq, covered, *dry, false}
				coverage := fmt.Sprintf("the snapshot at %d covers them: recovery starts from it", snapSeq)
				if !covered {
					coverage = fmt.Sprintf("no snapshot covers them (the latest is at %d): %s could no longer recover its state", snapSeq, pid)
					if snapSeq == 0 {
						coverage = fmt.Sprintf("no snapshot covers them (%s has none): %s could no longer recover its state", pid, pid)
					}
				}
				report := func() error {
					if *asJSON {
						return writeJSON(e.stdout, out)
					}
					verb := "deleted"
					if !out.Deleted {
						verb = "would delete"
					}
					if n == 0 {
						fmt.Fprintf(e.stdout, "nothing to delete: %q has no events up to %d in %s (highest sequence number %d)\n", pid, to, where, highest)
						return nil
					}
					fmt.Fprintf(e.stdout, "%s %s events of %q in %s (sequence numbers %d–%d); %s kept; the highest sequence number stays %d;\n%s\n",
						verb, num(n), pid, where, first, last, num(kept), highest, coverage)
					return nil
				}
				if n == 0 || *dry {
					return report()
				}
				if !covered && !*uncovered {
					return usagef("refusing: %s; take a snapshot at or after %d first, or pass --allow-uncovered if the entity does not need its history", coverage, last)
				}
				if err := e.confirm(fmt.Sprintf("Delete %s events of %s up to %d in %s? %s.", num(n), pid, to, where, coverage), *yes); err != nil {
					return err
				}
				if err := s.Journal.DeleteTo(e.ctx, pid, to); err != nil {
					return err
				}
				out.Deleted = true
				return report()
			}
		},
	}
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
