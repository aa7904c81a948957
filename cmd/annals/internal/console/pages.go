package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
)

func sortStrings(s []string) { slices.Sort(s) }

// ---------------------------------------------------------------- overview

type overviewData struct {
	Store  storeInfo `json:"store"`
	Schema struct {
		Current int    `json:"current"`
		Latest  int    `json:"latest"`
		Known   bool   `json:"known"`
		Note    string `json:"note,omitempty"`
	} `json:"schema"`
	Stats      *storeStats `json:"stats,omitempty"`
	StatsError string      `json:"stats_error,omitempty"`
	Rate       rateChart   `json:"rate"`
	Snapshots  string      `json:"snapshots"`
	Durable    string      `json:"durable_state"`
	Offsets    string      `json:"projection_offsets"`
	Membership string      `json:"membership"`
}

type rateChart struct {
	Samples      []sample `json:"samples"`
	EverySeconds float64  `json:"every_seconds"`
	How          string   `json:"how,omitempty"`
	Unavailable  string   `json:"unavailable,omitempty"`
	Chart        chart    `json:"-"`
}

func (s *Server) overview(r *http.Request) (any, error) {
	ctx := r.Context()
	var d overviewData
	d.Store = s.info()
	if s.opt.SchemaVersion != nil {
		cur, latest, err := s.opt.SchemaVersion(ctx)
		switch {
		case errors.Is(err, errNoSchemaVersion):
			d.Schema.Note = errNoSchemaVersion.Error()
		case err != nil:
			d.Schema.Note = "could not read the schema version: " + err.Error()
		default:
			d.Schema.Current, d.Schema.Latest, d.Schema.Known = cur, latest, true
			if latest == 0 {
				d.Schema.Note = "this store has no versioned schema"
			} else if cur < latest {
				d.Schema.Note = fmt.Sprintf("%d migration(s) pending: annals migrate", latest-cur)
			}
		}
	} else {
		d.Schema.Note = errNoSchemaVersion.Error()
	}
	if st, err := s.figures.storeStats(ctx); err != nil {
		d.StatsError = err.Error()
	} else {
		d.Stats = st
		d.Snapshots = fmt.Sprintf("%s snapshots, %s", num(st.Total.Snapshots), bytesText(st.Total.SnapshotBytes))
	}
	if d.Stats == nil {
		d.Snapshots = "not counted (no statistics)"
	}
	d.Rate = s.rateChart()
	d.Durable = "not kept by this store"
	if s.st.Durable != nil {
		d.Durable = "kept; the store does not count its durable states: look one up by id on Entities"
	}
	d.Offsets = "not kept by this store"
	if s.st.Offsets != nil {
		d.Offsets = "kept (see Projections)"
	}
	d.Membership = "not kept by this store"
	if s.st.Membership != nil {
		d.Membership = "kept (see Cluster)"
	}
	return d, nil
}

func (s *Server) rateChart() rateChart {
	samples, how, unavailable := s.figures.chart()
	rc := rateChart{Samples: samples, EverySeconds: s.opt.SampleEvery.Seconds(), How: how, Unavailable: unavailable}
	if rc.Samples == nil {
		rc.Samples = []sample{}
	}
	var pts []point
	for _, sm := range samples {
		pts = append(pts, point{sm.At, sm.PerSecond, fmt.Sprintf("%s: %.1f events/s (%d events)", sm.At.UTC().Format("15:04:05"), sm.PerSecond, sm.Events)})
	}
	rc.Chart = lineChart("rate-chart", "events per second", pts)
	return rc
}

// ---------------------------------------------------------------- entities

type idRow struct {
	PersistenceID string `json:"persistence_id"`
	Highest       int64  `json:"highest_sequence_nr"`
	Slice         int    `json:"slice"`
}

type entitiesData struct {
	Types     []string `json:"entity_types"`
	Type      string   `json:"type"`
	Prefix    string   `json:"prefix"`
	After     string   `json:"after,omitempty"`
	IDs       []idRow  `json:"ids"`
	NextAfter string   `json:"next_after,omitempty"`
	Scanned   int      `json:"scanned"`
	Note      string   `json:"note,omitempty"`
	NextLink  string   `json:"-"`
	Lookup    string   `json:"-"`
}

// maxScan bounds the ids one search reads.
const maxScan = 20_000

func (s *Server) entities(r *http.Request) (any, error) {
	ctx := r.Context()
	d := entitiesData{Type: param(r, "type"), Prefix: param(r, "prefix"), After: param(r, "after"), IDs: []idRow{}}
	if st, err := s.figures.storeStats(ctx); err == nil {
		for _, t := range st.Types {
			d.Types = append(d.Types, t.EntityType)
		}
	}
	q, ok := s.st.Queries.(query.PersistenceIDsQuery)
	if !ok {
		return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("the %s store cannot list its persistence ids", s.st.Kind)}
	}
	limit := s.opt.PageSize
	if n, err := strconv.Atoi(param(r, "limit")); err == nil && n > 0 && n <= 1000 {
		limit = n
	}
	// The ids wanted start with TYPE|PREFIX (or PREFIX, with no type).
	want := d.Prefix
	if d.Type != "" {
		want = d.Type + annals.Separator + d.Prefix
	}
	after := d.After
	// Seek to the prefix, and stop past it, only where ids are listed in
	// byte order (SQLite's binary collation, the memory store); elsewhere
	// (the database's collation, Cassandra's token order) read through.
	ordered := s.st.Kind == "sqlite" || s.st.Kind == "memory"
	if after == "" && ordered {
		after = before(want)
	}
	batch := min(1000, maxScan)
	for d.Scanned < maxScan && len(d.IDs) < limit {
		ids, err := q.CurrentPersistenceIDs(ctx, d.Type, after, batch)
		if err != nil {
			return nil, err
		}
		done := len(ids) < batch
		for _, id := range ids {
			d.Scanned++
			after = id
			if !strings.HasPrefix(id, want) {
				if ordered && id > want {
					done = true
					break
				}
				continue
			}
			h, err := s.st.Journal.HighestSequenceNr(ctx, id, 0)
			if err != nil {
				return nil, err
			}
			d.IDs = append(d.IDs, idRow{id, h, annals.Slice(id)})
			if len(d.IDs) == limit {
				d.NextAfter = id
				break
			}
		}
		if done {
			if len(d.IDs) < limit {
				d.NextAfter = ""
			}
			break
		}
		if d.Scanned >= maxScan && len(d.IDs) < limit {
			d.NextAfter = after
			d.Note = fmt.Sprintf("read %d ids without filling the page; more may match further on (next page)", d.Scanned)
		}
	}
	if d.NextAfter != "" {
		d.NextLink = link("/entities", "type", d.Type, "prefix", d.Prefix, "after", d.NextAfter)
	}
	if !ordered && d.Prefix != "" {
		d.Note = strings.TrimSpace(d.Note + fmt.Sprintf(" This store does not list ids in byte order, so a prefix search reads through the ids (at most %d a page).", maxScan))
	}
	if len(d.IDs) == 0 && d.Prefix != "" {
		d.Lookup = want
	}
	return d, nil
}

// before returns a string just below every string with prefix p in byte
// order ("" for no prefix).
func before(p string) string {
	if p == "" {
		return ""
	}
	b := []byte(p)
	last := len(b) - 1
	if b[last] == 0 {
		return string(b[:last])
	}
	b[last]--
	return string(b) + "\U0010FFFF"
}

// ---------------------------------------------------------------- one id

type eventRow struct {
	SequenceNr   int64     `json:"sequence_nr"`
	Timestamp    time.Time `json:"timestamp"`
	Tags         []string  `json:"tags"`
	SerializerID int32     `json:"serializer_id"`
	Manifest     string    `json:"manifest"`
	WriterID     string    `json:"writer_id"`
	Payload      Payload   `json:"payload"`
	// Snapshot is a snapshot taken at this event's number.
	Snapshot *snapRow `json:"snapshot,omitempty"`
}

type snapRow struct {
	SequenceNr int64     `json:"sequence_nr"`
	Timestamp  time.Time `json:"timestamp"`
	Manifest   string    `json:"manifest"`
	Payload    Payload   `json:"payload"`
}

type stateRow struct {
	Revision  int64     `json:"revision"`
	Timestamp time.Time `json:"timestamp"`
	Tag       string    `json:"tag"`
	Manifest  string    `json:"manifest"`
	Payload   Payload   `json:"payload"`
}

type entityData struct {
	PersistenceID string     `json:"persistence_id"`
	EntityType    string     `json:"entity_type"`
	Slice         int        `json:"slice"`
	Highest       int64      `json:"highest_sequence_nr"`
	From          int64      `json:"from"`
	Events        []eventRow `json:"events"`
	// Deleted says which events were deleted (DeleteTo), when the page
	// starts where they were.
	Deleted string `json:"deleted,omitempty"`
	// Snapshots lists snapshots within the page with no event of theirs
	// on it (their event was deleted).
	Snapshots []snapRow `json:"snapshots"`
	Next      int64     `json:"next,omitempty"`
	NextLink  string    `json:"-"`
	PrevLink  string    `json:"-"`
	State     *stateRow `json:"durable_state,omitempty"`
	StateNote string    `json:"durable_state_note"`
	// StateAt is the state folded to the number asked for (?state=N);
	// CanFold says whether the console knows the type's behavior, and
	// FoldNote why not, or why the fold failed.
	StateAt  *StateAt `json:"state_at,omitempty"`
	CanFold  bool     `json:"can_fold"`
	FoldNote string   `json:"state_at_note,omitempty"`
	FoldAt   int64    `json:"-"`
}

func (s *Server) entity(r *http.Request) (any, error) {
	ctx := r.Context()
	pid := param(r, "id")
	if pid == "" {
		return nil, badRequest("give an id: /entity?id=TYPE%sID", annals.Separator)
	}
	from := int64(1)
	if v := param(r, "from"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return nil, badRequest("from %q: want a sequence number of 1 or more", v)
		}
		from = n
	}
	size := int64(s.opt.PageSize)
	if n, err := strconv.ParseInt(param(r, "size"), 10, 64); err == nil && n > 0 && n <= 1000 {
		size = n
	}
	d := entityData{PersistenceID: pid, EntityType: annals.EntityType(pid), Slice: annals.Slice(pid), From: from, Events: []eventRow{}, Snapshots: []snapRow{}}
	h, err := s.st.Journal.HighestSequenceNr(ctx, pid, 0)
	if err != nil {
		return nil, err
	}
	d.Highest = h
	// One page: at most size+1 events (the one more says there is a next
	// page), read with a bound.
	for rp, err := range s.st.Journal.Replay(ctx, pid, from, math.MaxInt64, size+1) {
		if err != nil {
			return nil, err
		}
		if int64(len(d.Events)) == size {
			d.Next = rp.SequenceNr
			break
		}
		d.Events = append(d.Events, eventRow{
			SequenceNr: rp.SequenceNr, Timestamp: rp.Timestamp.UTC(), Tags: nonNil(rp.Tags), SerializerID: rp.SerializerID,
			Manifest: rp.Manifest, WriterID: rp.WriterID, Payload: s.opt.FormatPayload(rp.SerializerID, rp.Manifest, rp.Payload),
		})
	}
	switch {
	case h > 0 && len(d.Events) == 0 && from == 1:
		d.Deleted = fmt.Sprintf("every event (1 to %d) was deleted", h)
	case len(d.Events) > 0 && d.Events[0].SequenceNr > from:
		d.Deleted = fmt.Sprintf("events %d to %d were deleted", from, d.Events[0].SequenceNr-1)
	}
	// The snapshots within the page's numbers, youngest first, walking down.
	hi := h
	if d.Next > 0 {
		hi = d.Next - 1
	}
	snaps, err := snapshotsIn(ctx, s.st.Snapshots, pid, from, hi)
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		row := snapRow{sn.Metadata.SequenceNr, sn.Metadata.Timestamp.UTC(), sn.Manifest, s.opt.FormatPayload(sn.SerializerID, sn.Manifest, sn.Payload)}
		i := slices.IndexFunc(d.Events, func(e eventRow) bool { return e.SequenceNr == row.SequenceNr })
		if i >= 0 {
			d.Events[i].Snapshot = &row
		} else {
			d.Snapshots = append(d.Snapshots, row)
		}
	}
	if d.Next > 0 {
		d.NextLink = link("/entity", "id", pid, "from", strconv.FormatInt(d.Next, 10))
	}
	if from > 1 {
		d.PrevLink = link("/entity", "id", pid, "from", strconv.FormatInt(max(1, from-size), 10))
	}
	if err := s.foldState(r, &d); err != nil {
		return nil, err
	}
	if s.st.Durable == nil {
		d.StateNote = "this store keeps no durable state"
	} else if o, found, err := s.st.Durable.Get(ctx, pid); err != nil {
		return nil, err
	} else if found {
		d.State = &stateRow{o.Revision, o.Timestamp.UTC(), o.Tag, o.Manifest, s.opt.FormatPayload(o.SerializerID, o.Manifest, o.Payload)}
		d.StateNote = "the store keeps the latest revision of a durable state only; earlier revisions were replaced"
	} else {
		d.StateNote = "no durable state stored for this id"
	}
	return d, nil
}

// foldState fills the state at ?state=N when the console knows the
// entity type's behavior, else says why it cannot.
func (s *Server) foldState(r *http.Request, d *entityData) error {
	fold := s.opt.States[d.EntityType]
	d.CanFold = fold != nil
	d.FoldAt = d.Highest
	v := param(r, "state")
	if v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return badRequest("state %q: want a sequence number of 1 or more", v)
		}
		d.FoldAt = n
	}
	if fold == nil {
		d.FoldNote = fmt.Sprintf("The state cannot be shown: a registry decodes events, but a state needs the behavior's event handler, and the console knows none for entity type %q.", d.EntityType)
		if s.opt.NoStateHint != "" {
			d.FoldNote += " " + s.opt.NoStateHint
		}
		return nil
	}
	if v == "" {
		return nil
	}
	st, err := fold(r.Context(), s.st.Journal, s.st.Snapshots, d.PersistenceID, d.FoldAt)
	if err != nil {
		if r.Context().Err() != nil {
			return err
		}
		d.FoldNote = fmt.Sprintf("The state at #%d cannot be shown: %v", d.FoldAt, err)
		return nil
	}
	d.StateAt = &st
	return nil
}

// maxSnapshotsShown bounds the snapshots one page lists.
const maxSnapshotsShown = 100

// snapshotsIn returns the snapshots of pid numbered from..to, youngest
// first (a snapshot store's Load returns the youngest match).
func snapshotsIn(ctx context.Context, ss snapshot.Store, pid string, from, to int64) ([]snapshot.Snapshot, error) {
	var out []snapshot.Snapshot
	for to >= from && len(out) < maxSnapshotsShown {
		sn, ok, err := ss.Load(ctx, pid, snapshot.Criteria{MinSequenceNr: from, MaxSequenceNr: to})
		if err != nil || !ok {
			return out, err
		}
		out = append(out, sn)
		to = sn.Metadata.SequenceNr - 1
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// ---------------------------------------------------------------- projections

type instanceRow struct {
	Name           string    `json:"name"`
	Key            string    `json:"key"`
	Offset         string    `json:"offset"`
	Paused         bool      `json:"paused"`
	Updated        time.Time `json:"updated,omitzero"`
	Slices         string    `json:"slices"`
	Pending        *int64    `json:"pending_events,omitempty"`
	Exact          bool      `json:"exact"`
	OldestPending  time.Time `json:"oldest_pending,omitzero"`
	LagSeconds     *float64  `json:"lag_seconds,omitempty"`
	BacklogUnknown string    `json:"backlog_unknown,omitempty"`
}

type projectionsData struct {
	Instances []instanceRow `json:"instances"`
	Note      string        `json:"note"`
	Lag       []sample      `json:"lag_samples"`
	LagChart  chart         `json:"-"`
	Done      string        `json:"-"`
}

// instances lists the stored projection instances with their backlogs.
func (s *Server) instances(ctx context.Context) ([]instanceRow, error) {
	if s.st.Offsets == nil {
		return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("the %s store keeps no projection offsets", s.st.Kind)}
	}
	l, ok := s.st.Admin.(admin.ProjectionLister)
	if !ok {
		return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("the %s store keeps projection offsets but cannot list them (it offers no admin.ProjectionLister); annals projections pause NAME KEY works on an instance you name", s.st.Kind)}
	}
	all, err := l.ListProjections(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	rows := []instanceRow{}
	for _, in := range all {
		row := instanceRow{Name: in.ID.Name, Key: in.ID.Key, Offset: offsetText(in.Offset), Paused: in.Paused, Updated: in.Updated}
		f := allSlices
		if r, ok := sliceRange(in.ID.Key); ok {
			f.MinSlice, f.MaxSlice = r.Min, r.Max
		}
		row.Slices = fmt.Sprintf("%d-%d", f.MinSlice, f.MaxSlice)
		b, exact, err := s.figures.backlog(ctx, in.Offset, f)
		switch {
		case errors.Is(err, query.ErrUnsupportedOffset):
			row.BacklogUnknown = "the offset is of a kind this store's events do not have: the projection reads another store (annals projections status --source URL counts there)"
		case errors.Is(err, errCannotCount):
			row.BacklogUnknown = errCannotCount.Error()
		case err != nil:
			return nil, fmt.Errorf("backlog of %s: %w", in.ID, err)
		default:
			lag := 0.0
			if b.Events > 0 {
				lag = max(0, now.Sub(b.Oldest).Seconds())
			}
			row.Pending, row.Exact, row.OldestPending, row.LagSeconds = &b.Events, exact, b.Oldest.UTC(), &lag
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (s *Server) projections(r *http.Request) (any, error) {
	rows, err := s.instances(r.Context())
	if err != nil {
		return nil, err
	}
	d := projectionsData{Instances: rows, Done: param(r, "done"),
		Note: "The store keeps each instance's offset, paused flag and last update, and nothing else: whether a projection runs, restarts after failures or gave up, and its last error, are known only to the process that runs it."}
	samples, _, _ := s.figures.chart()
	var pts []point
	d.Lag = []sample{}
	for _, sm := range samples {
		if sm.MaxLagSeconds == nil {
			continue
		}
		d.Lag = append(d.Lag, sm)
		pts = append(pts, point{sm.At, *sm.MaxLagSeconds, fmt.Sprintf("%s: largest lag %s, %d events behind", sm.At.UTC().Format("15:04:05"), seconds(*sm.MaxLagSeconds), *sm.Behind)})
	}
	d.LagChart = lineChart("lag-chart", "largest lag (seconds)", pts)
	return d, nil
}

// projectionAction pauses, resumes or resets an instance: refused without
// --allow-writes or the form's token; without confirm=yes it answers the
// confirmation page.
func (s *Server) projectionAction(w http.ResponseWriter, r *http.Request) {
	if !s.opt.AllowWrites {
		s.fail(w, r, &httpError{http.StatusForbidden, "the console is read-only: start it with --allow-writes to pause, resume or reset projections"})
		return
	}
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, badRequest("%v", err))
		return
	}
	if !equal(r.PostForm.Get("csrf"), s.csrf) {
		s.fail(w, r, &httpError{http.StatusForbidden, "the form's token is missing or stale: reload the projections page and try again"})
		return
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		if u, err := urlHost(o); err != nil || u != r.Host {
			s.fail(w, r, &httpError{http.StatusForbidden, "a form from another origin (" + o + ") was refused"})
			return
		}
	}
	action := r.PathValue("action")
	name, key := r.PostForm.Get("name"), r.PostForm.Get("key")
	var question string
	switch action {
	case "pause":
		question = fmt.Sprintf("Pause %s/%s? A running instance stops within its recheck interval.", name, key)
	case "resume":
		question = fmt.Sprintf("Resume %s/%s?", name, key)
	case "reset":
		question = fmt.Sprintf("Remove the offset of %s/%s? It will handle its whole source again. Pause it first: a running instance saves its own offset over the reset.", name, key)
	default:
		s.fail(w, r, &httpError{http.StatusNotFound, fmt.Sprintf("no action %q: want pause, resume or reset", action)})
		return
	}
	if name == "" {
		s.fail(w, r, badRequest("name the projection"))
		return
	}
	id := offsetsID(name, key)
	if err := id.Validate(); err != nil {
		s.fail(w, r, badRequest("%v", err))
		return
	}
	ctx := r.Context()
	st, err := s.st.Offsets.Load(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		s.render(w, http.StatusOK, "confirm", struct {
			Action, Name, Key, Question, Offset string
			Paused                              bool
		}{action, name, key, question, offsetText(st.Offset), st.Paused})
		return
	}
	var done string
	switch action {
	case "pause", "resume":
		err = s.st.Offsets.SetPaused(ctx, id, action == "pause")
		done = fmt.Sprintf("%sd %s", action, id)
	case "reset":
		err = s.st.Offsets.Reset(ctx, id)
		done = fmt.Sprintf("removed the offset of %s (was %s)", id, offsetText(st.Offset))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.opt.Log.Printf("console: %s", done)
	http.Redirect(w, r, link("/projections", "done", done), http.StatusSeeOther)
}

// ---------------------------------------------------------------- cluster

type clusterData struct {
	Name   string         `json:"cluster"`
	Status cluster.Status `json:"status"`
	Live   int            `json:"live_members"`
	Slices int            `json:"slices_held"`
	Note   string         `json:"note,omitempty"`
	Daemon []placement    `json:"placement"`
}

type placement struct {
	Daemon   string `json:"daemon"`
	Instance int    `json:"instance"`
	Member   string `json:"member"`
	Live     bool   `json:"live"`
}

func (s *Server) cluster(r *http.Request) (any, error) {
	if s.st.Membership == nil {
		return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("the %s store keeps no cluster membership", s.st.Kind)}
	}
	name := param(r, "cluster")
	if name == "" {
		name = s.opt.Cluster
	}
	st, err := cluster.ReadStatus(r.Context(), s.st.Membership, name)
	if err != nil {
		return nil, err
	}
	d := clusterData{Name: name, Status: st, Daemon: []placement{}}
	if d.Status.Members == nil {
		d.Status.Members = []cluster.MemberStatus{}
	}
	if d.Status.Unowned == nil {
		d.Status.Unowned = []string{}
	}
	for _, m := range st.Members {
		if m.Live {
			d.Live++
			for _, rg := range m.Ranges {
				d.Slices += rg.Max - rg.Min + 1
			}
		}
		for daemon, insts := range m.Daemons {
			for _, i := range insts {
				d.Daemon = append(d.Daemon, placement{daemon, i, m.Name, m.Live})
			}
		}
	}
	slices.SortFunc(d.Daemon, func(a, b placement) int {
		if c := strings.Compare(a.Daemon, b.Daemon); c != 0 {
			return c
		}
		return a.Instance - b.Instance
	})
	if len(st.Members) == 0 {
		d.Note = fmt.Sprintf("no members of cluster %q are recorded in this store", name)
	}
	return d, nil
}

// ---------------------------------------------------------------- slices

type sliceCounts struct {
	Counts []int64   `json:"events"`
	Exact  bool      `json:"exact"`
	AsOf   time.Time `json:"as_of"`
	Note   string    `json:"note,omitempty"`
}

type slicesData struct {
	Events      *sliceCounts `json:"events_per_slice,omitempty"`
	EventsError string       `json:"events_error,omitempty"`
	Max         int64        `json:"max_events"`
	Projections []bandRow    `json:"projections"`
	Members     []bandRow    `json:"members"`
	Grid        []cell       `json:"-"`
	BandsHeight int          `json:"-"`
	AxisY       int          `json:"-"`
	TickY       int          `json:"-"`
}

// bandRow is a row of spans over the slices: one projection's instances,
// or one member's ranges.
type bandRow struct {
	Name  string `json:"name"`
	Spans []span `json:"spans"`
	Y     int    `json:"-"`
	TextY int    `json:"-"`
}

type span struct {
	Min   int     `json:"min"`
	Max   int     `json:"max"`
	Label string  `json:"label"`
	X     float64 `json:"-"`
	W     float64 `json:"-"`
}

type cell struct {
	X, Y  int
	Fill  string
	Title string
}

// slicesTTL is how long the slices page reuses its counts.
const slicesTTL = 60 * time.Second

// countTimeout bounds the counting of events per slice.
const countTimeout = 10 * time.Second

func (s *Server) slicesPage(r *http.Request) (any, error) {
	ctx := r.Context()
	d := slicesData{Projections: []bandRow{}, Members: []bandRow{}}
	sc, err := s.sliceCounts(ctx)
	if err != nil {
		d.EventsError = err.Error()
	} else {
		d.Events = sc
		for _, c := range sc.Counts {
			d.Max = max(d.Max, c)
		}
	}
	if rows, err := s.instances(ctx); err == nil {
		byName := map[string]int{}
		for _, in := range rows {
			i, ok := byName[in.Name]
			if !ok {
				i = len(d.Projections)
				d.Projections = append(d.Projections, bandRow{Name: in.Name})
				byName[in.Name] = i
			}
			b := &d.Projections[i]
			rg, ok := sliceRange(in.Key)
			if !ok {
				rg = annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1}
			}
			label := fmt.Sprintf("%s %s", in.Name, in.Key)
			if in.Pending != nil {
				label += fmt.Sprintf(": %d behind", *in.Pending)
			}
			b.Spans = append(b.Spans, span{Min: rg.Min, Max: rg.Max, Label: label})
		}
	}
	if s.st.Membership != nil {
		if st, err := cluster.ReadStatus(ctx, s.st.Membership, s.opt.Cluster); err == nil {
			for _, m := range st.Members {
				if !m.Live {
					continue
				}
				b := bandRow{Name: m.Name}
				for _, rg := range m.Ranges {
					b.Spans = append(b.Spans, span{Min: rg.Min, Max: rg.Max, Label: fmt.Sprintf("%s holds %d-%d (epoch %d)", m.Name, rg.Min, rg.Max, rg.Epoch)})
				}
				d.Members = append(d.Members, b)
			}
		}
	}
	y := 0
	for _, rows := range [][]bandRow{d.Projections, d.Members} {
		for i := range rows {
			rows[i].Y, rows[i].TextY = y, y+14
			y += 22
			for j := range rows[i].Spans {
				sp := &rows[i].Spans[j]
				sp.X, sp.W = float64(sp.Min), float64(sp.Max-sp.Min+1)
			}
		}
	}
	d.AxisY, d.TickY, d.BandsHeight = y+2, y+16, y+22
	for i := range annals.NumberOfSlices {
		c := cell{X: (i % 32) * 16, Y: (i / 32) * 16}
		var n int64
		if d.Events != nil {
			n = d.Events.Counts[i]
		}
		c.Fill = heat(n, d.Max)
		c.Title = fmt.Sprintf("slice %d: %s events", i, num(n))
		if d.Events == nil {
			c.Title = fmt.Sprintf("slice %d", i)
		}
		d.Grid = append(d.Grid, c)
	}
	return d, nil
}

// sliceCounts counts the events of each slice, per entity type (cached
// for slicesTTL).
func (s *Server) sliceCounts(ctx context.Context) (*sliceCounts, error) {
	f := s.figures
	f.mu.Lock()
	cached := f.slices
	f.mu.Unlock()
	if cached != nil && time.Since(cached.AsOf) < slicesTTL {
		return cached, nil
	}
	st, err := f.storeStats(ctx)
	if err != nil {
		return nil, err
	}
	sc := &sliceCounts{Counts: make([]int64, annals.NumberOfSlices), Exact: true}
	ctx, cancel := context.WithTimeout(ctx, countTimeout)
	defer cancel()
	_, hasBacklog := s.st.Admin.(admin.BacklogReader)
	q, hasSlices := s.st.Queries.(query.EventsBySlicesQuery)
	switch {
	case hasBacklog:
	types:
		for _, t := range st.Types {
			for i := range annals.NumberOfSlices {
				b, _, err := f.backlog(ctx, query.NoOffset(), admin.EventFilter{EntityType: t.EntityType, MinSlice: i, MaxSlice: i})
				if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
					sc.Exact = false
					sc.Note = fmt.Sprintf("counting took longer than %s: slices of %s from %d on, and later types, are not counted", countTimeout, t.EntityType, i)
					break types
				}
				if err != nil {
					return nil, err
				}
				sc.Counts[i] += b.Events
			}
		}
	case hasSlices:
		read := 0
	read:
		for _, t := range st.Types {
			for env, err := range q.CurrentEventsBySlices(ctx, t.EntityType, 0, annals.NumberOfSlices-1, query.NoOffset()) {
				if err != nil {
					if ctx.Err() != nil {
						sc.Exact, sc.Note = false, fmt.Sprintf("counting took longer than %s: an estimate", countTimeout)
						break read
					}
					return nil, err
				}
				sc.Counts[env.Slice]++
				if read++; read >= maxCounted {
					sc.Exact, sc.Note = false, fmt.Sprintf("counted the first %d events only: an estimate", maxCounted)
					break read
				}
			}
		}
		if sc.Exact {
			sc.Note = "counted by reading the events (the store cannot count a backlog)"
		}
	default:
		return nil, fmt.Errorf("the %s store cannot count its events by slice", s.st.Kind)
	}
	if st.Estimate {
		sc.Exact = false
		sc.Note = strings.TrimSpace(sc.Note + " The entity types come from an estimate: " + st.Source)
	}
	sc.AsOf = time.Now()
	f.mu.Lock()
	f.slices = sc
	f.mu.Unlock()
	return sc, nil
}

// heat is a cell's colour for n events of at most top.
func heat(n, top int64) string {
	if n == 0 || top == 0 {
		return "#eef1f5"
	}
	v := math.Sqrt(float64(n) / float64(top))
	light := 90 - int(v*60)
	return fmt.Sprintf("hsl(210, 70%%, %d%%)", light)
}

// sliceRange is the slice range a projection key names ("0-255").
func sliceRange(key string) (annals.SliceRange, bool) {
	lo, hi, ok := strings.Cut(key, "-")
	a, errA := strconv.Atoi(lo)
	b, errB := strconv.Atoi(hi)
	if !ok || errA != nil || errB != nil || a < 0 || a > b || b >= annals.NumberOfSlices {
		return annals.SliceRange{}, false
	}
	return annals.SliceRange{Min: a, Max: b}, true
}
