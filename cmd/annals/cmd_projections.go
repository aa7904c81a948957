package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/projection"
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
                            write time; 0 when nothing is pending). The events are
                            counted in --source when given (the store the
                            projections read, such as a Cassandra journal whose
                            projections keep their offsets in this SQLite file or
                            PostgreSQL schema; give --tag for a source by tag),
                            else in this store. An instance whose offset the event
                            store cannot resume from (a Cassandra projection's
                            time-based UUID in a SQLite file) is listed with its
                            backlog unknown (?) and the reason
  pause NAME [KEY]          pause one instance, or every stored instance of NAME
  resume NAME [KEY]         resume them
  reset-offset NAME KEY     remove the offset: the instance handles its whole
                            source again (--offset sets one instead); asks for
                            confirmation unless --yes; --dry-run changes nothing

A running projection obeys pause and resume within its recheck interval
(a second by default). Pause an instance before resetting it: a running
instance saves its own offset over the reset.

The store keeps each instance's offset, paused flag and last update, and
nothing else: whether a projection is running, restarting after failures
or gave up, and its last error, are known only to the process that runs
it (projection.Projection.Status, and Behind's *projection.FailingError),
so status cannot show them; it says so under its table.

--json prints {"projections": [{"name", "key", "offset" (as tail
--from-offset takes it; {} for none), "paused", "updated" (null when
unknown)}]}; status adds "slices" ("min-max"), "pending_events",
"oldest_pending" and "newest_pending" (null when none), "lag_seconds";
when the backlog cannot be counted, those are absent and "backlog_unknown"
says why.
pause and resume print the instances they changed in the same shape;
reset-offset prints {"name", "key", "previous_offset", "offset",
"dry_run", "changed"}.`,
		examples: []string{
			"annals projections list --store sqlite:./annals.db",
			"annals projections status bank-balances --type Account",
			"annals projections status --store sqlite:./model.db --source cassandra://127.0.0.1:9042/app --tag orders",
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
			fs.StringVar(&p.source, "source", "", "status: count the backlog in the store at this `URL` (the one the projections read), not in --store")
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
	source          string
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
	// BacklogUnknown says why status could not count the backlog.
	BacklogUnknown string `json:"backlog_unknown,omitempty"`
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
	if p.source != "" && p.sub != "status" {
		return usagef("--source is for status")
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
	var count backlogCounter
	if status {
		events := p.s
		if p.source != "" {
			if events, err = p.e.open(p.source, stores.Existing); err != nil {
				return fmt.Errorf("--source: %w", err)
			}
			defer events.Close()
		}
		if count, err = p.backlogCounter(events); err != nil {
			return err
		}
	}
	out := struct {
		Projections []instanceJSON `json:"projections"`
	}{[]instanceJSON{}}
	now := time.Now()
	var unknown []string // the reasons of backlogs not counted, once each
	for _, in := range ins {
		j := toInstanceJSON(in)
		if status {
			f := admin.EventFilter{EntityType: p.entityType, Tag: p.tag, MinSlice: 0, MaxSlice: annals.NumberOfSlices - 1}
			if r, ok := sliceRange(in.ID.Key); ok {
				f.MinSlice, f.MaxSlice = r.Min, r.Max
			}
			j.Slices = fmt.Sprintf("%d-%d", f.MinSlice, f.MaxSlice)
			b, err := count(p.e.ctx, in.Offset, f)
			if errors.Is(err, query.ErrUnsupportedOffset) {
				j.BacklogUnknown = unsupportedOffset(in.Offset, p.source != "")
				if !slices.Contains(unknown, j.BacklogUnknown) {
					unknown = append(unknown, j.BacklogUnknown)
				}
				out.Projections = append(out.Projections, j)
				continue
			}
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
		switch {
		case status && j.PendingEvents == nil:
			cols = append(cols, j.Slices, "?", "?", "?")
		case status:
			cols = append(cols, j.Slices, num(*j.PendingEvents), timeText(time.Time(*j.OldestPending)), dur(time.Duration(*j.LagSeconds*float64(time.Second))))
		}
		row(tw, cols...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if status {
		for _, why := range unknown {
			fmt.Fprintf(p.e.stderr, "backlog unknown (?): %s\n", why)
		}
		fmt.Fprintln(p.e.stderr, "note: the store keeps offsets and paused flags only; whether a projection runs, restarts after failures or gave up, and its last error, are known only to the process that runs it (projection.Projection.Status)")
	}
	return nil
}

// backlogCounter counts the events after an offset that match a filter.
type backlogCounter func(ctx context.Context, after query.Offset, f admin.EventFilter) (admin.Backlog, error)

// backlogCounter returns how status counts backlogs in the event store
// events: its admin.BacklogReader, or, for a store without one (Cassandra),
// its query by --tag, through StoredEventsByTag where the store offers it
// (so what an eventual-consistency delay holds back counts too).
func (p *projectionsCmd) backlogCounter(events *stores.Store) (backlogCounter, error) {
	if br, ok := events.Admin.(admin.BacklogReader); ok {
		return br.Backlog, nil
	}
	byTag, ok := events.Queries.(query.EventsByTagQuery)
	if !ok {
		return nil, fmt.Errorf("the %s store cannot count what its projections have still to process", events.Kind)
	}
	if p.tag == "" {
		return nil, usagef("the %s store counts what its projections have still to process by tag: give --tag", events.Kind)
	}
	read := byTag.CurrentEventsByTag
	if stored, ok := byTag.(projection.StoredEventsByTagQuery); ok {
		read = stored.StoredEventsByTag
	}
	return func(ctx context.Context, after query.Offset, f admin.EventFilter) (admin.Backlog, error) {
		return countBacklog(read(ctx, f.Tag, after), f)
	}, nil
}

// countBacklog counts the envelopes of events that match f.
func countBacklog(events iter.Seq2[query.Envelope, error], f admin.EventFilter) (admin.Backlog, error) {
	var b admin.Backlog
	for env, err := range events {
		if err != nil {
			return admin.Backlog{}, err
		}
		if (f.EntityType != "" && env.EntityType != f.EntityType) || env.Slice < f.MinSlice || env.Slice > f.MaxSlice {
			continue
		}
		b.Events++
		if b.Oldest.IsZero() || env.Timestamp.Before(b.Oldest) {
			b.Oldest = env.Timestamp
		}
		if env.Timestamp.After(b.Newest) {
			b.Newest = env.Timestamp
		}
	}
	return b, nil
}

// unsupportedOffset says why a backlog from offset o was not counted.
func unsupportedOffset(o query.Offset, fromSource bool) string {
	kind := map[query.OffsetKind]string{
		query.KindSequence:  "a sequence offset (a SQLite or memory store's)",
		query.KindTimestamp: "a timestamp offset (a PostgreSQL store's)",
		query.KindTimeUUID:  "a time-based UUID offset (a Cassandra journal's events by tag)",
	}[o.Kind]
	if fromSource {
		return fmt.Sprintf("the offset is %s, which the --source store's queries do not resume from", kind)
	}
	return fmt.Sprintf("the offset is %s, which this store's events do not have: its projection reads another store; count there with --source URL (and --tag)", kind)
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
