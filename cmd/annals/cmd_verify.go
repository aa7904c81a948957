package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
)

func verifyCommand() *command {
	return &command{
		name: "verify", summary: "check a store for damage: its files or tables, and every id's events and snapshot",
		help: `Reads the whole store and reports what it cannot read, changing nothing:

  integrity   the database's own check of its files, where the store has
              one (SQLite: integrity_check, every page and index)
  events      every persistence id's events, replayed from the first: an
              id whose replay fails, whose sequence numbers go backwards or
              skip (deletions only remove a prefix), or whose highest
              sequence number is below its last event
  snapshots   every id's latest snapshot, loaded

Each problem names the id and goes on to the next, so one damaged id does
not hide the others (copy stops at the first). Exit code 1 when anything
is wrong. It reads every event: on a large store it takes as long as a
full replay.

--json prints {"store", "integrity": {"checked", "problems": [text]},
"ids", "events", "snapshots", "problems": [{"persistence_id", "problem"}],
"ok"}.`,
		examples: []string{
			"annals verify --store sqlite:./annals.db",
			"annals verify --store postgres://annals@db.internal/annals --type Account --json",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			entityType := fs.String("type", "", "only the ids of entity type `TYPE`")
			return func(e *env, _ []string) error {
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				res, err := verifyStore(e.ctx, s, *entityType)
				if err != nil {
					return err
				}
				return res.report(e, s, *asJSON)
			}
		},
	}
}

// verifyProblem is one thing verify could not read, or found wrong.
type verifyProblem struct {
	PersistenceID string `json:"persistence_id"`
	Problem       string `json:"problem"`
}

type verifyResult struct {
	Store     string `json:"store"`
	Integrity struct {
		Checked  bool     `json:"checked"`
		Problems []string `json:"problems"`
	} `json:"integrity"`
	IDs       int64           `json:"ids"`
	Events    int64           `json:"events"`
	Snapshots int64           `json:"snapshots"`
	Problems  []verifyProblem `json:"problems"`
	OK        bool            `json:"ok"`
}

// verifyStore runs the checks; it fails only when it cannot go on (the
// ids cannot be listed, the context ended).
func verifyStore(ctx context.Context, s *stores.Store, entityType string) (*verifyResult, error) {
	res := &verifyResult{Store: s.Kind + " " + s.Where, Problems: []verifyProblem{}}
	res.Integrity.Problems = []string{}
	if ic, ok := s.Admin.(admin.IntegrityChecker); ok {
		problems, err := ic.CheckIntegrity(ctx)
		if err != nil {
			return nil, err
		}
		res.Integrity.Checked = true
		res.Integrity.Problems = append(res.Integrity.Problems, problems...)
	}
	ids, ok := s.Queries.(query.PersistenceIDsQuery)
	if !ok {
		return nil, fmt.Errorf("the %s store cannot list its persistence ids", s.Kind)
	}
	problem := func(pid, format string, args ...any) {
		res.Problems = append(res.Problems, verifyProblem{pid, fmt.Sprintf(format, args...)})
	}
	after := ""
	for {
		page, err := ids.CurrentPersistenceIDs(ctx, entityType, after, idsPage)
		if err != nil {
			return nil, fmt.Errorf("listing the persistence ids after %q: %w", after, err)
		}
		for _, pid := range page {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			res.IDs++
			var last int64
			for r, err := range s.Journal.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
				if err != nil {
					if last == 0 {
						problem(pid, "replay failed: %v", err)
					} else {
						problem(pid, "replay failed after event %d: %v", last, err)
					}
					break
				}
				if last > 0 && r.SequenceNr != last+1 {
					problem(pid, "event %d follows event %d", r.SequenceNr, last)
				}
				last = r.SequenceNr
				res.Events++
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if h, err := s.Journal.HighestSequenceNr(ctx, pid, 0); err != nil {
				problem(pid, "highest sequence number: %v", err)
			} else if h < last {
				problem(pid, "highest sequence number %d is below its last event %d", h, last)
			}
			if s.Snapshots != nil {
				_, found, err := s.Snapshots.Load(ctx, pid, snapshot.Latest())
				switch {
				case err != nil && !errors.Is(err, context.Canceled):
					problem(pid, "latest snapshot: %v", err)
				case found:
					res.Snapshots++
				}
			}
		}
		if len(page) < idsPage {
			break
		}
		after = page[len(page)-1]
	}
	res.OK = len(res.Problems) == 0 && len(res.Integrity.Problems) == 0
	return res, nil
}

func (res *verifyResult) report(e *env, s *stores.Store, asJSON bool) error {
	if asJSON {
		if err := writeJSON(e.stdout, res); err != nil {
			return err
		}
	} else {
		tw := table(e.stdout)
		integrity := "not offered by this store"
		if res.Integrity.Checked {
			integrity = fmt.Sprintf("%d problems", len(res.Integrity.Problems))
			if len(res.Integrity.Problems) == 0 {
				integrity = "ok"
			}
		}
		row(tw, "store", res.Store)
		row(tw, "integrity", integrity)
		row(tw, "read", fmt.Sprintf("%s ids, %s events, %s snapshots", num(res.IDs), num(res.Events), num(res.Snapshots)))
		row(tw, "problems", len(res.Problems))
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, p := range res.Integrity.Problems {
			fmt.Fprintf(e.stdout, "integrity: %s\n", p)
		}
		for _, p := range res.Problems {
			fmt.Fprintf(e.stdout, "%s: %s\n", p.PersistenceID, p.Problem)
		}
	}
	if !res.OK {
		return fmt.Errorf("%s: %d integrity problems, %d ids with problems", res.Store, len(res.Integrity.Problems), len(res.Problems))
	}
	return nil
}
