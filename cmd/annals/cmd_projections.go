package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

func projectionsCommand() *command {
	return &command{
		name: "projections", args: "list|status|pause|resume|reset-offset [NAME [KEY]]",
		summary: "list, pause, resume, reset projections; their lag per slice range",
		help: `Manages the projection instances whose offsets the store keeps. An
instance is a projection NAME and a KEY (the part of the work it covers,
such as the slice range "0-255").

  list [NAME]               every stored instance: offset, paused flag, last update
  status [NAME]             the same with each instance's backlog: the events after
                            its offset (within the slice range its KEY names, when it
                            names one; only of --type or --tag when given), the
                            oldest of them, and the lag (now minus that event's
                            write time; 0 when nothing is pending)
  pause NAME [KEY]          pause one instance, or every stored instance of NAME
  resume NAME [KEY]         resume them
  reset-offset NAME KEY     remove the offset: the instance handles its whole
                            source again (--offset sets one instead); asks for
                            confirmation unless --yes; --dry-run changes nothing

A running projection obeys pause and resume within its recheck interval
(a second by default). Pause an instance before resetting it: a running
instance saves its own offset over the reset.

--json prints {"projections": [{"name", "key", "offset" (as tail
--from-offset takes it; {} for none), "paused", "updated" (null when
unknown)}]}; status adds "slices" ("min-max"), "pending_events",
"oldest_pending" and "newest_pending" (null when none), "lag_seconds".
pause and resume print the instances they changed in the same shape;
reset-offset prints {"name", "key", "previous_offset", "offset",
"dry_run", "changed"}.`,
		examples: []string{
			"annals projections list --store sqlite:./annals.db",
			"annals projections status bank-balances --type Account",
			"annals projections pause bank-balances",
			"annals projections reset-offset bank-balances 0-255 --yes",
			`annals projections reset-offset bank-balances 0-255 --offset '{"seq":1000}' --dry-run`,
			"annals projections resume bank-balances",
		},
		minArgs: 1, maxArgs: 3,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			p := &projectionsCmd{}
			p.store, p.asJSON = storeFlag(fs), jsonFlag(fs)
			fs.StringVar(&p.entityType, "type", "", "status: count only events of this entity `TYPE`")
			fs.StringVar(&p.tag, "tag", "", "status: count only events with this `TAG`")
			fs.StringVar(&p.offset, "offset", "", "reset-offset: set this `OFFSET` (such as {\"seq\":1000}) instead of removing it")
			fs.BoolVar(&p.yes, "yes", false, "reset-offset: do it without asking")
			fs.BoolVar(&p.dry, "dry-run", false, "reset-offset: show what would change; change nothing")
			return p.run
		},
	}
}

type projectionsCmd struct {
	store           *string
	asJSON          *bool
	entityType, tag string
	offset          string
	yes, dry        bool
	s               *stores.Store
	e               *env
	sub, name, key  string
	hasName, hasKey bool
}

// instanceJSON is the JSON shape of a projection instance.
type instanceJSON struct {
	Name          string       `json:"name"`
	Key           string       `json:"key"`
	Offset        query.Offset `json:"offset"`
	Paused        bool         `json:"paused"`
	Updated       jsonTime     `json:"updated"`
	Slices        string       `json:"slices,omitempty"`
	PendingEvents *int64       `json:"pending_events,omitempty"`
	OldestPending *jsonTime    `json:"oldest_pending,omitempty"`
	NewestPending *jsonTime    `json:"newest_pending,omitempty"`
	LagSeconds    *float64     `json:"lag_seconds,omitempty"`
}

func (p *projectionsCmd) run(e *env, args []string) error {
	p.e, p.sub = e, args[0]
	if len(args) > 1 {
		p.name, p.hasName = args[1], true
	}
	if len(args) > 2 {
		p.key, p.hasKey = args[2], true
	}
	switch p.sub {
	case "list", "status":
		if p.hasKey {
			return usagef("%s takes at most a NAME", p.sub)
		}
	case "pause", "resume":
		if !p.hasName {
			return usagef("%s needs a projection NAME (and optionally a KEY)", p.sub)
		}
	case "reset-offset":
		if !p.hasKey {
			return usagef("reset-offset needs a projection NAME and KEY")
		}
	default:
		return usagef("unknown projections command %q: want list, status, pause, resume or reset-offset", p.sub)
	}
	if p.entityType != "" && p.tag != "" {
		return usagef("give --type or --tag, not both")
	}
	var err error
	if p.s, err = e.open(*p.store, stores.Existing); err != nil {
		return err
	}
	defer p.s.Close()
	if p.s.Offsets == nil {
		return fmt.Errorf("the %s store keeps no projection offsets", p.s.Kind)
	}
	switch p.sub {
	case "list", "status":
		return p.list(p.sub == "status")
	case "pause", "resume":
		return p.setPaused(p.sub == "pause")
	}
	return p.reset()
}

// instances returns the stored instances (of the NAME given, if any).
func (p *projectionsCmd) instances() ([]admin.ProjectionInstance, error) {
	l, ok := p.s.Admin.(admin.ProjectionLister)
	if !ok {
		return nil, fmt.Errorf("the %s store cannot list its projections; name the projection and key", p.s.Kind)
	}
	all, err := l.ListProjections(p.e.ctx)
	if err != nil {
		return nil, err
	}
	var out []admin.ProjectionInstance
	for _, in := range all {
		if !p.hasName || in.ID.Name == p.name {
			out = append(out, in)
		}
	}
	return out, nil
}

// sliceRange is the slice range a key names ("0-255"), if it names one.
func sliceRange(key string) (annals.SliceRange, bool) {
	lo, hi, ok := strings.Cut(key, "-")
	a, errA := strconv.Atoi(lo)
	b, errB := strconv.Atoi(hi)
	if !ok || errA != nil || errB != nil || a < 0 || a > b || b >= annals.NumberOfSlices {
		return annals.SliceRange{}, false
	}
	return annals.SliceRange{Min: a, Max: b}, true
}

func toInstanceJSON(in admin.ProjectionInstance) instanceJSON {
	return instanceJSON{Name: in.ID.Name, Key: in.ID.Key, Offset: in.Offset, Paused: in.Paused, Updated: jsonTime(in.Updated)}
}

func (p *projectionsCmd) list(status bool) error {
	ins, err := p.instances()
	if err != nil {
		return err
	}
	var br admin.BacklogReader
	if status {
		var ok bool
		if br, ok = p.s.Admin.(admin.BacklogReader); !ok {
			return fmt.Errorf("the %s store cannot count what its projections have still to process", p.s.Kind)
		}
	}
	out := struct {
		Projections []instanceJSON `json:"projections"`
	}{[]instanceJSON{}}
	now := time.Now()
	for _, in := range ins {
		j := toInstanceJSON(in)
		if status {
			f := admin.EventFilter{EntityType: p.entityType, Tag: p.tag, MinSlice: 0, MaxSlice: annals.NumberOfSlices - 1}
			if r, ok := sliceRange(in.ID.Key); ok {
				f.MinSlice, f.MaxSlice = r.Min, r.Max
			}
			j.Slices = fmt.Sprintf("%d-%d", f.MinSlice, f.MaxSlice)
			b, err := br.Backlog(p.e.ctx, in.Offset, f)
			if err != nil {
				return fmt.Errorf("backlog of %s: %w", in.ID, err)
			}
			lag := 0.0
			if b.Events > 0 {
				lag = max(0, now.Sub(b.Oldest).Seconds())
			}
			oldest, newest := jsonTime(b.Oldest), jsonTime(b.Newest)
			j.PendingEvents, j.OldestPending, j.NewestPending, j.LagSeconds = &b.Events, &oldest, &newest, &lag
		}
		out.Projections = append(out.Projections, j)
	}
	if *p.asJSON {
		return writeJSON(p.e.stdout, out)
	}
	if len(ins) == 0 {
		fmt.Fprintln(p.e.stderr, "no stored projection instances")
		return nil
	}
	header := []string{"NAME", "KEY", "OFFSET", "PAUSED", "UPDATED"}
	if status {
		header = append(header, "SLICES", "PENDING", "OLDEST PENDING", "LAG")
	}
	tw := table(p.e.stdout, header...)
	for _, j := range out.Projections {
		cols := []any{j.Name, textOr(j.Key, `""`), offsetText(j.Offset), yesNo(j.Paused), timeText(time.Time(j.Updated))}
		if status {
			cols = append(cols, j.Slices, num(*j.PendingEvents), timeText(time.Time(*j.OldestPending)), dur(time.Duration(*j.LagSeconds*float64(time.Second))))
		}
		row(tw, cols...)
	}
	return tw.Flush()
}

func (p *projectionsCmd) setPaused(paused bool) error {
	var ids []offsets.ID
	if p.hasKey {
		ids = []offsets.ID{{Name: p.name, Key: p.key}}
	} else {
		ins, err := p.instances()
		if err != nil {
			return err
		}
		for _, in := range ins {
			ids = append(ids, in.ID)
		}
		if len(ids) == 0 {
			return usagef("no stored instances of projection %q: name the KEY too", p.name)
		}
	}
	out := struct {
		Projections []instanceJSON `json:"projections"`
	}{[]instanceJSON{}}
	for _, id := range ids {
		if err := p.s.Offsets.SetPaused(p.e.ctx, id, paused); err != nil {
			return err
		}
		st, err := p.s.Offsets.Load(p.e.ctx, id)
		if err != nil {
			return err
		}
		out.Projections = append(out.Projections, toInstanceJSON(admin.ProjectionInstance{ID: id, State: st, Updated: time.Now()}))
		if !*p.asJSON {
			verb := "resumed"
			if paused {
				verb = "paused"
			}
			fmt.Fprintf(p.e.stdout, "%s %s\n", verb, id)
		}
	}
	if *p.asJSON {
		return writeJSON(p.e.stdout, out)
	}
	return nil
}

func (p *projectionsCmd) reset() error {
	id := offsets.ID{Name: p.name, Key: p.key}
	if err := id.Validate(); err != nil {
		return usagef("%v", err)
	}
	target := query.NoOffset()
	if p.offset != "" {
		var err error
		if target, err = parseOffset(p.offset); err != nil {
			return err
		}
	}
	st, err := p.s.Offsets.Load(p.e.ctx, id)
	if err != nil {
		return err
	}
	out := struct {
		Name     string       `json:"name"`
		Key      string       `json:"key"`
		Previous query.Offset `json:"previous_offset"`
		Offset   query.Offset `json:"offset"`
		DryRun   bool         `json:"dry_run"`
		Changed  bool         `json:"changed"`
	}{p.name, p.key, st.Offset, target, p.dry, false}
	now, to := offsetText(st.Offset), offsetText(target)
	question := fmt.Sprintf("Remove the offset of %s (now %s)? It will handle its whole source again.", id, now)
	done := fmt.Sprintf("removed the offset of %s (was %s); it will handle its whole source again", id, now)
	would := fmt.Sprintf("would remove the offset of %s (now %s)", id, now)
	if p.offset != "" {
		question = fmt.Sprintf("Set the offset of %s to %s (now %s)?", id, to, now)
		done = fmt.Sprintf("set the offset of %s to %s (was %s)", id, to, now)
		would = fmt.Sprintf("would set the offset of %s to %s (now %s)", id, to, now)
	}
	if !p.dry {
		if !st.Paused {
			fmt.Fprintf(p.e.stderr, "note: %s is not paused; if it runs, its next save overwrites this change (pause it first: annals projections pause %s %s)\n", id, id.Name, id.Key)
		}
		if err := p.e.confirm(question, p.yes); err != nil {
			return err
		}
		if p.offset != "" {
			err = p.s.Offsets.SaveOffset(p.e.ctx, id, target)
		} else {
			err = p.s.Offsets.Reset(p.e.ctx, id)
		}
		if err != nil {
			return err
		}
		out.Changed = true
	}
	if *p.asJSON {
		return writeJSON(p.e.stdout, out)
	}
	if p.dry {
		fmt.Fprintln(p.e.stdout, would)
	} else {
		fmt.Fprintln(p.e.stdout, done)
	}
	return nil
}
