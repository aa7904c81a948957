package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

type instanceOut struct {
	Name           string          `json:"name"`
	BacklogUnknown string          `json:"backlog_unknown"`
	Key            string          `json:"key"`
	Offset         json.RawMessage `json:"offset"`
	Paused         bool            `json:"paused"`
	Updated        *time.Time      `json:"updated"`
	Slices         string          `json:"slices"`
	PendingEvents  *int64          `json:"pending_events"`
	OldestPending  *time.Time      `json:"oldest_pending"`
	NewestPending  *time.Time      `json:"newest_pending"`
	LagSeconds     *float64        `json:"lag_seconds"`
}

type instancesOut struct {
	Projections []instanceOut `json:"projections"`
}

// sameOffset reports whether raw is the JSON of want.
func sameOffset(raw json.RawMessage, want query.Offset) bool {
	var o query.Offset
	if err := json.Unmarshal(raw, &o); err != nil {
		return false
	}
	return o.Kind == want.Kind && o.Sequence == want.Sequence && o.Timestamp.Equal(want.Timestamp) && maps2equal(o.Seen, want.Seen)
}

func maps2equal(a, b map[string]int64) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func TestProjections(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		lowID, highID := offsets.ID{Name: "balances", Key: "0-511"}, offsets.ID{Name: "balances", Key: "512-1023"}
		load := func(id offsets.ID) (state offsets.State, err error) {
			withStore(t, st.url, func(s *stores.Store) { state, err = s.Offsets.Load(context.Background(), id) })
			return state, err
		}

		// The fixture's offset of 0-511 (after the 6th Account event), one
		// further on, and the pending events after them as the store's own
		// queries count them.
		low, high := annals.SliceRange{Min: 0, Max: 511}, annals.SliceRange{Min: 512, Max: 1023}
		type rangeType struct {
			r   annals.SliceRange
			typ string
		}
		pending := map[rangeType]int64{}
		var envs []query.Envelope
		withStore(t, st.url, func(s *stores.Store) {
			envs = accountEvents(t, s)
			for _, typ := range []string{"", "Account"} {
				types := []string{"Account", "Cart", "Order"}
				if typ != "" {
					types = []string{typ}
				}
				for r, after := range map[annals.SliceRange]query.Offset{low: envs[5].Offset, high: query.NoOffset()} {
					for _, ty := range types {
						for _, err := range s.Queries.(query.EventsBySlicesQuery).CurrentEventsBySlices(context.Background(), ty, r.Min, r.Max, after) {
							if err != nil {
								t.Fatal(err)
							}
							pending[rangeType{r, typ}]++
						}
					}
				}
			}
		})
		saved, later := envs[5].Offset, envs[7].Offset
		savedJSON, laterJSON := mustJSON(t, saved), mustJSON(t, later)
		if st.sqlite() {
			// The offsets are orderings. Stored events by ordering:
			// Account|a-1 1-5, Account|a-2 6-8, Order|o-1 9-10, Cart|c-2
			// 17-19 (the rest deleted).
			if string(savedJSON) != `{"seq":6}` || string(laterJSON) != `{"seq":8}` {
				t.Fatalf("offsets %s and %s, want {\"seq\":6} and {\"seq\":8}", savedJSON, laterJSON)
			}
			stored := map[string][]int64{"Account|a-1": {1, 2, 3, 4, 5}, "Account|a-2": {6, 7, 8}, "Order|o-1": {9, 10}, "Cart|c-2": {17, 18, 19}}
			for rt, n := range pending {
				after := map[annals.SliceRange]int64{low: 6, high: 0}[rt.r]
				want := int64(0)
				for pid, ords := range stored {
					if !rt.r.Contains(annals.Slice(pid)) || (rt.typ != "" && annals.EntityType(pid) != rt.typ) {
						continue
					}
					for _, o := range ords {
						if o > after {
							want++
						}
					}
				}
				if n != want {
					t.Errorf("type %q, slices %v: the queries count %d events after %d, want %d", rt.typ, rt.r, n, after, want)
				}
			}
		} else if saved.Kind != query.KindTimestamp {
			t.Fatalf("offset of a postgres query: %v", saved)
		}

		cli(t, env, "projections", "list").want(t, 0, []string{"balances  0-511", string(savedJSON), "512-1023", "yes"}, nil)
		var list instancesOut
		decode(t, cli(t, env, "projections", "list", "--json"), &list)
		if len(list.Projections) != 2 || list.Projections[0].Key != "0-511" || !sameOffset(list.Projections[0].Offset, saved) || !jsonEqual(list.Projections[0].Offset, string(savedJSON)) ||
			list.Projections[0].Paused || list.Projections[0].Updated == nil || list.Projections[0].PendingEvents != nil ||
			list.Projections[1].Key != "512-1023" || !jsonEqual(list.Projections[1].Offset, "{}") || !list.Projections[1].Paused {
			t.Errorf("list %+v", list)
		}

		// Status: the events after each offset within the key's slice
		// range (those at a timestamp offset's own timestamp that it lists
		// as seen are not pending).
		for _, typ := range []string{"", "Account"} {
			var out instancesOut
			decode(t, cli(t, env, "projections", "status", "balances", "--json", "--type", typ), &out)
			if len(out.Projections) != 2 || out.Projections[0].PendingEvents == nil || out.Projections[1].PendingEvents == nil {
				t.Fatalf("status %+v", out)
			}
			lo, hi := out.Projections[0], out.Projections[1]
			wantLo, wantHi := pending[rangeType{low, typ}], pending[rangeType{high, typ}]
			if lo.Slices != "0-511" || *lo.PendingEvents != wantLo || hi.Slices != "512-1023" || *hi.PendingEvents != wantHi {
				t.Errorf("type %q: pending %d in 0-511 (want %d), %d in 512-1023 (want %d)", typ, *lo.PendingEvents, wantLo, *hi.PendingEvents, wantHi)
			}
			for _, in := range out.Projections {
				if (*in.PendingEvents > 0) != (in.OldestPending != nil && in.LagSeconds != nil && *in.LagSeconds > 0) {
					t.Errorf("%s: pending %d, oldest %v, lag %v", in.Key, *in.PendingEvents, in.OldestPending, in.LagSeconds)
				}
			}
		}
		cli(t, env, "projections", "status").want(t, 0, []string{"PENDING", "LAG", "0-511", "512-1023"}, nil)

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
		for id, want := range map[offsets.ID]bool{lowID: false, highID: true} {
			state, err := load(id)
			if err != nil || state.Paused != want {
				t.Errorf("%v after pause and resume: %+v, %v; want paused %v", id, state, err, want)
			}
		}
		if state, _ := load(lowID); !sameOffset(mustJSON(t, state.Offset), saved) {
			t.Errorf("pause and resume changed the offset: %v", state.Offset)
		}

		// Reset: a dry run and a refusal change nothing; --offset sets one
		// (as list prints it); without, it is removed.
		unchanged := st.watch(t)
		cli(t, env, "projections", "reset-offset", "balances", "0-511", "--dry-run").want(t, 0, []string{"would remove the offset of balances/0-511 (now " + string(savedJSON) + ")"}, nil)
		cli(t, env, "projections", "reset-offset", "balances", "0-511").want(t, 2, nil, []string{"pass --yes"})
		cliIn(t, env, strings.NewReader("y\n"), "projections", "reset-offset", "balances", "0-511").want(t, 2, nil, []string{"pass --yes"})
		unchanged("a dry run or refused reset")
		if state, _ := load(lowID); !sameOffset(mustJSON(t, state.Offset), saved) {
			t.Errorf("a dry run or refused reset changed the offset: %v", state.Offset)
		}
		cli(t, env, "projections", "reset-offset", "balances", "0-511", "--offset", string(laterJSON), "--yes").want(t, 0,
			[]string{"set the offset of balances/0-511 to " + string(laterJSON) + " (was " + string(savedJSON) + ")"}, []string{"is not paused"})
		if state, err := load(lowID); err != nil || !sameOffset(mustJSON(t, state.Offset), later) || state.Paused {
			t.Errorf("after reset-offset --offset: %+v, %v", state, err)
		}
		var reset struct {
			Name     string          `json:"name"`
			Key      string          `json:"key"`
			Previous json.RawMessage `json:"previous_offset"`
			Offset   json.RawMessage `json:"offset"`
			DryRun   bool            `json:"dry_run"`
			Changed  bool            `json:"changed"`
		}
		decode(t, cli(t, env, "projections", "reset-offset", "balances", "0-511", "--yes", "--json"), &reset)
		if reset.Name != "balances" || reset.Key != "0-511" || !sameOffset(reset.Previous, later) || !jsonEqual(reset.Previous, string(laterJSON)) ||
			!jsonEqual(reset.Offset, "{}") || !reset.Changed || reset.DryRun {
			t.Errorf("reset %+v", reset)
		}
		if state, err := load(lowID); err != nil || state.Offset.Kind != query.KindNone {
			t.Errorf("after reset-offset: %+v, %v", state, err)
		}
		decode(t, cli(t, env, "projections", "list", "balances", "--json"), &list)
		if len(list.Projections) == 0 || !jsonEqual(list.Projections[0].Offset, "{}") {
			t.Errorf("after reset: %+v", list.Projections)
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
	})
}

// TestProjectionsStatusOfOffsetsFromAnotherStore: status on the SQLite
// file that keeps a Cassandra projection's offsets (time-based UUIDs) with
// its read model, the layout the docs recommend for Cassandra read models,
// lists every instance and says why it cannot count a backlog there; with
// --source and --tag it counts it in the Cassandra journal, those events
// the eventual-consistency delay still holds back included.
func TestProjectionsStatusOfOffsetsFromAnotherStore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "model.db")
	model := "sqlite:" + path
	cli(t, nil, "init", "--store", model).want(t, 0, []string{"created schema version"}, nil)
	orders, local := offsets.ID{Name: "orders"}, offsets.ID{Name: "local", Key: "0-1023"}
	save := func(id offsets.ID, o query.Offset) {
		t.Helper()
		withStore(t, model, func(s *stores.Store) {
			if err := s.Offsets.SaveOffset(context.Background(), id, o); err != nil {
				t.Fatal(err)
			}
		})
	}
	status := func(t *testing.T, args ...string) map[string]instanceOut {
		t.Helper()
		var out instancesOut
		decode(t, cli(t, nil, append([]string{"projections", "status", "--store", model, "--json"}, args...)...), &out)
		byName := map[string]instanceOut{}
		for _, in := range out.Projections {
			byName[in.Name] = in
		}
		return byName
	}
	// A time-based UUID of 2024, as a Cassandra projection saves them.
	save(orders, query.TimeUUIDOffset([16]byte{0x58, 0x1f, 0x1c, 0x00, 0x3d, 0x2a, 0x11, 0xef, 0x80, 0, 0, 0, 0, 0, 0, 1}))
	save(local, query.SequenceOffset(0))

	t.Run("offsets only", func(t *testing.T) {
		got := status(t)
		if o := got["orders"]; o.PendingEvents != nil || o.LagSeconds != nil || !strings.Contains(o.BacklogUnknown, "time-based UUID") || !strings.Contains(o.BacklogUnknown, "--source") {
			t.Errorf("orders: %+v; want its backlog unknown, naming the offset and --source", o)
		}
		if l := got["local"]; l.PendingEvents == nil || *l.PendingEvents != 0 || l.BacklogUnknown != "" {
			t.Errorf("local (a sequence offset of this file's events): %+v; want 0 pending", l)
		}
		cli(t, nil, "projections", "status", "--store", model).want(t, 0, []string{"orders", "?", "local"},
			[]string{"backlog unknown (?): the offset is a time-based UUID offset", "known only to the process that runs it"})
	})

	t.Run("counted in the Cassandra journal", func(t *testing.T) {
		base, _ := cassandratest.URL(t)
		// The default eventual-consistency delay (5 s): the events just
		// written are held back from the live query, and count.
		journalURL := base + "?first_time_bucket=" + time.Now().UTC().Add(-24*time.Hour).Format("20060102T15:04")
		cli(t, nil, "init", "--store", journalURL).want(t, 0, []string{"created schema version 1"}, nil)
		var envs []query.Envelope
		withStore(t, journalURL, func(s *stores.Store) {
			ctx := context.Background()
			for _, pid := range []string{"Order|o-1", "Order|o-2", "Order|o-3", "Order|o-4"} {
				w := journal.AtomicWrite{PersistenceID: pid}
				for seq := int64(1); seq <= 4; seq++ {
					w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte(`{}`), SerializerID: serialization.JSONID, Tags: []string{"orders"}})
				}
				if res, err := s.Journal.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
					t.Fatal(res, err)
				}
			}
			for env, err := range s.Queries.(projection.StoredEventsByTagQuery).StoredEventsByTag(ctx, "orders", query.NoOffset()) {
				if err != nil {
					t.Fatal(err)
				}
				envs = append(envs, env)
			}
		})
		if len(envs) != 16 {
			t.Fatalf("%d events tagged orders, want 16", len(envs))
		}
		save(orders, envs[4].Offset) // handled 5 of the 16
		got := status(t, "--source", journalURL, "--tag", "orders")
		if o := got["orders"]; o.PendingEvents == nil || *o.PendingEvents != 11 || o.OldestPending == nil || !o.OldestPending.Equal(envs[5].Timestamp) ||
			o.NewestPending == nil || o.LagSeconds == nil || o.BacklogUnknown != "" {
			t.Errorf("orders: %+v; want 11 pending, the oldest at %v, the lag", o, envs[5].Timestamp)
		}
		if l := got["local"]; l.PendingEvents != nil || !strings.Contains(l.BacklogUnknown, "--source store's queries do not resume from") {
			t.Errorf("local (a sequence offset) counted in Cassandra: %+v; want its backlog unknown", l)
		}
		cli(t, nil, "projections", "status", "--store", model, "--source", journalURL).want(t, 2, nil, []string{"give --tag"})
		cli(t, nil, "projections", "list", "--store", model, "--source", journalURL).want(t, 2, nil, []string{"--source is for status"})
	})
}
