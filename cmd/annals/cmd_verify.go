package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/kafka"
)

func verifyCommand() *command {
	return &command{
		name: "verify", summary: "check a store for damage: its files or tables, every id's events and snapshot, their serializers",
		help: `Reads the whole store and reports what it cannot read, changing none of
its data (on Kafka its reads add Marks, below):

  integrity   the database's own check of its files, where the store has
              one (SQLite: integrity_check, every page and index)
  events      every persistence id's events, replayed from the first: an
              id whose replay fails, whose sequence numbers go backwards or
              skip (deletions only remove a prefix), or whose highest
              sequence number is below its last event
  snapshots   every id's latest snapshot, loaded (older ones are not read)
  payloads    every event's and snapshot's serializer id and manifest,
              against a registry (below)
  Kafka       on a kafka:// store, first the journal's topics (the type's,
              or every topic starting with the URL's topic prefix, and
              the prefix's own topic for ids without a type): each
              partition's records past the eventual store's pointer (its
              unreplicated head) are read and decoded as the replicator
              decodes them, so how far replication is behind is reported
              per partition, a record the replicator cannot decode is a
              problem (named by topic, partition, offset and key), and so
              are offsets Kafka deleted before they were applied; the ids
              in those heads are verified with the eventual store's.

The registry is the built-in serializers (bytes 4, protobuf 2, JSON 31 and
33, as serialization.NewRegistry has them) and what --registry names (it
repeats): demo (the demo's bank events and state, as JSON), ID (a
serializer id your services register), ID:MANIFEST,... (that id, with the
manifests it accepts; an empty MANIFEST is the empty manifest), or @FILE
(those, one per line, # starting a comment). A payload whose serializer id
is not in the registry is a problem (recovery fails on it), named by id and
sequence number; so is one whose manifest is not among those named for its
id, and one that annals has a type for and that fails to decode. annals
has no types of your services, so most payloads are not decoded: the
report says, per serializer id, how many were not decoded and whether
their manifests were checked. Durable state is not read.

Each problem names the id and goes on to the next, so one damaged id does
not hide the others (copy stops at the first). Exit code 1 when anything
is wrong; replication merely behind is not wrong. It reads every event: on
a large store it takes as long as a full replay. On Kafka each id's reads
add Marks to its topic, as every read of the Kafka journal does.

--json prints {"store", "integrity": {"checked", "problems": [text]},
"kafka" (kafka:// only): {"topics", "partitions": [{"topic",
"partition", "pointer" (null when nothing is applied), "start", "end",
"behind", "lost", "records", "appends", "events", "marks", "undecodable",
"ids"}]}, "ids", "events", "snapshots", "payloads": {"read",
"serializers": [{"serializer_id", "name", "known", "payloads",
"manifests_checked", "decoded"}], "not_checked": [text]}, "problems":
[{"persistence_id" ("" for a partition's), "problem"}], "ok"}.`,
		examples: []string{
			"annals verify --store sqlite:./annals.db",
			"annals verify --store postgres://annals@db.internal/annals --type Account --json",
			"annals verify --store sqlite:./annals-demo.db --registry demo",
			"annals verify --registry 100 --registry 31:shop.OrderPlaced,shop.OrderPaid --registry @serializers.txt",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			entityType := fs.String("type", "", "only the ids of entity type `TYPE`")
			var specs []string
			fs.Func("registry", "add `SPEC` to the registry payloads are checked against: "+registrySpecHelp+"; repeat it", func(v string) error {
				specs = append(specs, v)
				return nil
			})
			return func(e *env, _ []string) error {
				reg, err := newVerifyRegistry(specs)
				if err != nil {
					return err
				}
				url, err := e.storeURL(*store)
				if err != nil {
					return err
				}
				s, err := e.open(url, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				res, err := verifyStore(e.ctx, s, verifyOptions{entityType: *entityType, registry: reg, url: url})
				if err != nil {
					return err
				}
				return res.report(e, *asJSON)
			}
		},
	}
}

// verifyProblem is one thing verify could not read, or found wrong. A
// problem of a Kafka partition rather than an id has no persistence id.
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
	Kafka     *verifyKafka `json:"kafka,omitempty"`
	IDs       int64        `json:"ids"`
	Events    int64        `json:"events"`
	Snapshots int64        `json:"snapshots"`
	Payloads  struct {
		Read        int64          `json:"read"`
		Serializers []payloadStats `json:"serializers"`
		NotChecked  []string       `json:"not_checked"`
	} `json:"payloads"`
	Problems []verifyProblem `json:"problems"`
	OK       bool            `json:"ok"`
}

// verifyOptions is what verify checks beside the store.
type verifyOptions struct {
	entityType string
	registry   *verifyRegistry
	url        string // the store's URL (a kafka:// URL names the topics)
}

// verifyStore runs the checks; it fails only when it cannot go on (the
// ids cannot be listed, a Kafka topic cannot be read, the context ended).
//
// On the Kafka journal the topics' heads are read first, then the
// eventual store's ids listed: an id the replicator applies in between
// is in one or the other.
func verifyStore(ctx context.Context, s *stores.Store, o verifyOptions) (*verifyResult, error) {
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
	var headIDs []string // the Kafka heads' ids, ascending
	if j, ok := s.Journal.(*kafka.Journal); ok {
		u, err := stores.ParseKafkaURL(o.url)
		if err != nil {
			return nil, err
		}
		if headIDs, err = kafkaHeads(ctx, j, u, o.entityType, res); err != nil {
			return nil, err
		}
	}
	chk := newPayloadChecker(o.registry)
	headOnly := map[string]bool{} // the heads' ids not listed by the store yet
	for _, pid := range headIDs {
		headOnly[pid] = true
	}
	after := ""
	for {
		page, err := ids.CurrentPersistenceIDs(ctx, o.entityType, after, idsPage)
		if err != nil {
			return nil, fmt.Errorf("listing the persistence ids after %q: %w", after, err)
		}
		for _, pid := range page {
			if err := verifyID(ctx, s, pid, chk, res); err != nil {
				return nil, err
			}
			delete(headOnly, pid)
		}
		if len(page) < idsPage {
			break
		}
		after = page[len(page)-1]
	}
	for _, pid := range headIDs {
		if headOnly[pid] {
			if err := verifyID(ctx, s, pid, chk, res); err != nil {
				return nil, err
			}
		}
	}
	res.Payloads.Read, res.Payloads.Serializers, res.Payloads.NotChecked = chk.summary()
	if res.Payloads.Serializers == nil {
		res.Payloads.Serializers = []payloadStats{}
	}
	res.OK = len(res.Problems) == 0 && len(res.Integrity.Problems) == 0
	return res, nil
}

// verifyID reads one id's events and latest snapshot into res; it fails
// only when the context ends.
func verifyID(ctx context.Context, s *stores.Store, pid string, chk *payloadChecker, res *verifyResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	problem := func(format string, args ...any) {
		res.Problems = append(res.Problems, verifyProblem{pid, fmt.Sprintf(format, args...)})
	}
	res.IDs++
	var (
		last     int64
		payloads seqProblems
	)
	for r, err := range s.Journal.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			if last == 0 {
				problem("replay failed: %v", err)
			} else {
				problem("replay failed after event %d: %v", last, err)
			}
			break
		}
		if last > 0 && r.SequenceNr != last+1 {
			problem("event %d follows event %d", r.SequenceNr, last)
		}
		last = r.SequenceNr
		res.Events++
		if p := chk.check(r.SerializerID, r.Manifest, r.Payload); p != "" {
			payloads.add(p, r.SequenceNr)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	payloads.report(problem)
	if h, err := s.Journal.HighestSequenceNr(ctx, pid, 0); err != nil {
		problem("highest sequence number: %v", err)
	} else if h < last {
		problem("highest sequence number %d is below its last event %d", h, last)
	}
	if s.Snapshots != nil {
		sn, found, err := s.Snapshots.Load(ctx, pid, snapshot.Latest())
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			problem("latest snapshot: %v", err)
		case found:
			res.Snapshots++
			if p := chk.check(sn.SerializerID, sn.Manifest, sn.Payload); p != "" {
				problem("snapshot %d: %s", sn.Metadata.SequenceNr, p)
			}
		}
	}
	return nil
}

// seqProblems gathers one id's payload problems, each with the sequence
// numbers of the events it was found in.
type seqProblems struct {
	order []string
	seqs  map[string][]int64 // the first few
	count map[string]int64
}

// shownSeqs is how many sequence numbers a problem lists.
const shownSeqs = 5

func (b *seqProblems) add(problem string, seq int64) {
	if b.count == nil {
		b.seqs, b.count = map[string][]int64{}, map[string]int64{}
	}
	if b.count[problem] == 0 {
		b.order = append(b.order, problem)
	}
	b.count[problem]++
	if len(b.seqs[problem]) < shownSeqs {
		b.seqs[problem] = append(b.seqs[problem], seq)
	}
}

// report reports each problem once: "event 4: ...", "events 2, 3: ...",
// "events 2, 3, 4, 5, 6 and 12 more: ...".
func (b *seqProblems) report(problem func(format string, args ...any)) {
	for _, p := range b.order {
		seqs, n := b.seqs[p], b.count[p]
		if n == 1 {
			problem("event %d: %s", seqs[0], p)
			continue
		}
		list := make([]string, len(seqs))
		for i, s := range seqs {
			list[i] = fmt.Sprint(s)
		}
		more := ""
		if n > int64(len(seqs)) {
			more = fmt.Sprintf(" and %s more", num(n-int64(len(seqs))))
		}
		problem("events %s%s: %s", strings.Join(list, ", "), more, p)
	}
}

func (res *verifyResult) report(e *env, asJSON bool) error {
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
		if res.Kafka != nil {
			row(tw, "replication", res.Kafka.replicationText())
		}
		row(tw, "read", fmt.Sprintf("%s ids, %s events, %s snapshots", num(res.IDs), num(res.Events), num(res.Snapshots)))
		var manifests, decoded int64
		for _, st := range res.Payloads.Serializers {
			manifests, decoded = manifests+st.ManifestsChecked, decoded+st.Decoded
		}
		row(tw, "payloads", fmt.Sprintf("%s read: every serializer id checked, %s manifests checked by name, %s decoded",
			num(res.Payloads.Read), num(manifests), num(decoded)))
		row(tw, "problems", len(res.Problems))
		if err := tw.Flush(); err != nil {
			return err
		}
		if res.Kafka != nil {
			for _, p := range res.Kafka.Partitions {
				if p.Behind > 0 || p.Lost > 0 {
					fmt.Fprintf(e.stdout, "behind: %s\n", p.text())
				}
			}
		}
		for _, n := range res.Payloads.NotChecked {
			fmt.Fprintf(e.stdout, "not checked: %s\n", n)
		}
		for _, p := range res.Integrity.Problems {
			fmt.Fprintf(e.stdout, "integrity: %s\n", p)
		}
		for _, p := range res.Problems {
			if p.PersistenceID == "" {
				fmt.Fprintln(e.stdout, p.Problem)
				continue
			}
			fmt.Fprintf(e.stdout, "%s: %s\n", p.PersistenceID, p.Problem)
		}
	}
	if !res.OK {
		return fmt.Errorf("%s: %d integrity problems, %d problems", res.Store, len(res.Integrity.Problems), len(res.Problems))
	}
	return nil
}
