package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/annals-go/annals"
)

type instanceOut struct {
	Name          string          `json:"name"`
	Key           string          `json:"key"`
	Offset        json.RawMessage `json:"offset"`
	Paused        bool            `json:"paused"`
	Updated       *time.Time      `json:"updated"`
	Slices        string          `json:"slices"`
	PendingEvents *int64          `json:"pending_events"`
	OldestPending *time.Time      `json:"oldest_pending"`
	NewestPending *time.Time      `json:"newest_pending"`
	LagSeconds    *float64        `json:"lag_seconds"`
}

type instancesOut struct {
	Projections []instanceOut `json:"projections"`
}

func TestProjections(t *testing.T) {
	t.Parallel()
	path := fixture(t, t.TempDir())
	env := []string{"ANNALS_STORE=sqlite:" + path}

	cli(t, env, "projections", "list").want(t, 0, []string{"balances  0-511", `{"seq":6}`, "512-1023", "yes"}, nil)
	var list instancesOut
	decode(t, cli(t, env, "projections", "list", "--json"), &list)
	if len(list.Projections) != 2 || !jsonEqual(list.Projections[0].Offset, `{"seq":6}`) || list.Projections[0].Paused ||
		!jsonEqual(list.Projections[1].Offset, "{}") || !list.Projections[1].Paused || list.Projections[0].Updated == nil || list.Projections[0].PendingEvents != nil {
		t.Errorf("list %+v", list)
	}

	// Status: the events after each offset within the key's slice range.
	// Stored events by ordering: Account|a-1 1-5, Account|a-2 6-8,
	// Order|o-1 9-10, Cart|c-2 17-19 (the rest deleted).
	stored := map[string][]int64{"Account|a-1": {1, 2, 3, 4, 5}, "Account|a-2": {6, 7, 8}, "Order|o-1": {9, 10}, "Cart|c-2": {17, 18, 19}}
	pending := func(r annals.SliceRange, after int64, typ string) (n int64) {
		for pid, ords := range stored {
			if !r.Contains(annals.Slice(pid)) || (typ != "" && annals.EntityType(pid) != typ) {
				continue
			}
			for _, o := range ords {
				if o > after {
					n++
				}
			}
		}
		return n
	}
	low, high := annals.SliceRange{Min: 0, Max: 511}, annals.SliceRange{Min: 512, Max: 1023}
	for _, typ := range []string{"", "Account"} {
		var st instancesOut
		decode(t, cli(t, env, "projections", "status", "balances", "--json", "--type", typ), &st)
		if len(st.Projections) != 2 {
			t.Fatalf("status %+v", st)
		}
		lo, hi := st.Projections[0], st.Projections[1]
		if lo.Slices != "0-511" || *lo.PendingEvents != pending(low, 6, typ) || hi.Slices != "512-1023" || *hi.PendingEvents != pending(high, 0, typ) {
			t.Errorf("type %q: pending %d in 0-511 (want %d), %d in 512-1023 (want %d)", typ, *lo.PendingEvents, pending(low, 6, typ), *hi.PendingEvents, pending(high, 0, typ))
		}
		for _, in := range st.Projections {
			if (*in.PendingEvents > 0) != (in.OldestPending != nil && *in.LagSeconds > 0) {
				t.Errorf("%s: pending %d, oldest %v, lag %v", in.Key, *in.PendingEvents, in.OldestPending, *in.LagSeconds)
			}
		}
	}
	cli(t, env, "projections", "status").want(t, 0, []string{"PENDING", "LAG", "0-511"}, nil)

	// Pause every instance of a name, resume one.
	var changed instancesOut
	decode(t, cli(t, env, "projections", "pause", "balances", "--json"), &changed)
	if len(changed.Projections) != 2 || !changed.Projections[0].Paused || !changed.Projections[1].Paused {
		t.Errorf("pause: %+v", changed)
	}
	cli(t, env, "projections", "resume", "balances", "0-511").want(t, 0, []string{"resumed balances/0-511"}, nil)
	decode(t, cli(t, env, "projections", "list", "--json"), &list)
	if list.Projections[0].Paused || !list.Projections[1].Paused {
		t.Errorf("after resuming 0-511: %+v", list)
	}

	// Reset: a dry run and a refusal change nothing; --offset sets one.
	sum := fileSum(t, path)
	cli(t, env, "projections", "reset-offset", "balances", "0-511", "--dry-run").want(t, 0, []string{`would remove the offset of balances/0-511 (now {"seq":6})`}, nil)
	cli(t, env, "projections", "reset-offset", "balances", "0-511").want(t, 2, nil, []string{"pass --yes"})
	if fileSum(t, path) != sum {
		t.Fatal("a dry run or refused reset changed the file")
	}
	cli(t, env, "projections", "reset-offset", "balances", "0-511", "--offset", `{"seq":8}`, "--yes").want(t, 0, []string{`set the offset of balances/0-511 to {"seq":8} (was {"seq":6})`}, []string{"is not paused"})
	var reset struct {
		Name     string          `json:"name"`
		Key      string          `json:"key"`
		Previous json.RawMessage `json:"previous_offset"`
		Offset   json.RawMessage `json:"offset"`
		DryRun   bool            `json:"dry_run"`
		Changed  bool            `json:"changed"`
	}
	decode(t, cli(t, env, "projections", "reset-offset", "balances", "0-511", "--yes", "--json"), &reset)
	if !jsonEqual(reset.Previous, `{"seq":8}`) || !jsonEqual(reset.Offset, "{}") || !reset.Changed {
		t.Errorf("reset %+v", reset)
	}
	decode(t, cli(t, env, "projections", "list", "balances", "--json"), &list)
	if !jsonEqual(list.Projections[0].Offset, "{}") {
		t.Errorf("after reset: %+v", list.Projections[0])
	}

	for _, args := range [][]string{
		{"projections", "frob"},
		{"projections", "pause"},
		{"projections", "reset-offset", "balances"},
		{"projections", "reset-offset", "balances", "0-511", "--offset", "nonsense", "--yes"},
		{"projections", "status", "--type", "A", "--tag", "b"},
	} {
		if r := cli(t, env, args...); r.code != 2 {
			t.Errorf("%q: %s", args, r)
		}
	}
}
