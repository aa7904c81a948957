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
reuses a number; recovery needs a snapshot at or after SEQ to rebuild the
state. ` + deleteSafety + `

--json prints {"persistence_id", "to", "events" (how many go), "first"
and "last" (their sequence numbers, 0 when none), "highest_sequence_nr",
"kept" (events after SEQ), "dry_run", "deleted"}.`,
		examples: []string{
			"annals delete-to --store sqlite:./annals.db 'Account|a-42' 1000 --dry-run",
			"annals delete-to 'Account|a-42' 1000 --yes",
		},
		minArgs: 2, maxArgs: 2,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			yes := fs.Bool("yes", false, "delete without asking")
			dry := fs.Bool("dry-run", false, "show what would be deleted; change nothing")
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
				out := struct {
					PersistenceID string `json:"persistence_id"`
					To            int64  `json:"to"`
					Events        int64  `json:"events"`
					First         int64  `json:"first"`
					Last          int64  `json:"last"`
					Highest       int64  `json:"highest_sequence_nr"`
					Kept          int64  `json:"kept"`
					DryRun        bool   `json:"dry_run"`
					Deleted       bool   `json:"deleted"`
				}{pid, to, n, first, last, highest, kept, *dry, false}
				report := func() error {
					if *asJSON {
						return writeJSON(e.stdout, out)
					}
					verb := "deleted"
					if !out.Deleted {
						verb = "would delete"
					}
					if n == 0 {
						fmt.Fprintf(e.stdout, "nothing to delete: %q has no events up to %d (highest sequence number %d)\n", pid, to, highest)
						return nil
					}
					fmt.Fprintf(e.stdout, "%s %s events of %q (sequence numbers %d–%d); %s kept; the highest sequence number stays %d\n",
						verb, num(n), pid, first, last, num(kept), highest)
					return nil
				}
				if n == 0 || *dry {
					return report()
				}
				if err := e.confirm(fmt.Sprintf("Delete %s events of %s up to %d?", num(n), pid, to), *yes); err != nil {
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
