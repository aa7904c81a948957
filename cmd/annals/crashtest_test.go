package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestCrashTest runs a short crash test (the one CI runs) on SQLite,
// PostgreSQL, Cassandra and the Kafka journal, with oversized writes in
// the mix on all but PostgreSQL: the writer is killed three times, nothing
// acknowledged is missing, no refused write is stored, and the scratch
// store is removed. A memory store is refused.
func TestCrashTest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		store     func(t *testing.T) string
		snaps     string
		oversized string // --oversized
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "user.db") }, "0", "20"},
		{"postgres", func(t *testing.T) string { dsn, _ := pgtest.Schema(t); return dsn }, "3", "0"},
		{"cassandra", func(t *testing.T) string { u, _ := cassandratest.URL(t); return u }, "3", "20"},
		{"kafka", func(t *testing.T) string {
			brokers := kafkatest.Real(t)
			dsn, _ := pgtest.Schema(t)
			return "kafka://" + brokers[0] + "/?topic_prefix=" + kafkatest.Prefix(t, brokers, "crash") + "&eventual=" + dsn
		}, "3", "20"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := c.store(t)
			r := cli(t, nil, "crash-test", "--store", url, "--cycles", "3", "--entities", "50", "--snapshot-every", c.snaps, "--oversized", c.oversized, "--max-run", "300ms", "--json")
			var out struct {
				Store              string   `json:"store"`
				SnapshotEvery      int64    `json:"snapshot_every"`
				LateCommits        int64    `json:"late_commits"`
				RecoveryP50ms      float64  `json:"recovery_p50_ms"`
				RecoveryP99ms      float64  `json:"recovery_p99_ms"`
				Cycles             int64    `json:"cycles"`
				Entities           int      `json:"entities"`
				AcknowledgedWrites int64    `json:"acknowledged_writes"`
				AcknowledgedEvents int64    `json:"acknowledged_events"`
				StoredEvents       int64    `json:"stored_events"`
				Lost               int64    `json:"lost"`
				Duplicated         int64    `json:"duplicated"`
				HalfWritten        int64    `json:"half_written"`
				Gaps               int64    `json:"gaps"`
				RecoveryMismatches int64    `json:"recovery_mismatches"`
				RefusedWrites      int64    `json:"refused_writes"`
				RefusedStored      int64    `json:"refused_stored"`
				Problems           []string `json:"problems"`
				Interrupted        bool     `json:"interrupted"`
				OK                 bool     `json:"ok"`
				Scratch            string   `json:"scratch"`
			}
			decode(t, r, &out)
			if !out.OK || out.Interrupted || out.Cycles != 3 || out.Entities != 50 || out.Lost+out.Duplicated+out.HalfWritten+out.Gaps+out.RecoveryMismatches+out.RefusedStored != 0 || len(out.Problems) != 0 {
				t.Errorf("crash test: %+v", out)
			}
			if out.Store != c.name || out.RecoveryP50ms <= 0 || out.RecoveryP99ms < out.RecoveryP50ms {
				t.Errorf("store %q, recovery p50 %v ms, p99 %v ms; want %s and figures", out.Store, out.RecoveryP50ms, out.RecoveryP99ms, c.name)
			}
			if (c.oversized != "0") != (out.RefusedWrites > 0) {
				t.Errorf("%d writes refused with --oversized %s", out.RefusedWrites, c.oversized)
			}
			if out.AcknowledgedWrites == 0 || out.StoredEvents < out.AcknowledgedEvents {
				t.Errorf("%d writes acknowledged, %d events of them, %d stored: want some, all stored", out.AcknowledgedWrites, out.AcknowledgedEvents, out.StoredEvents)
			}
			if c.name == "sqlite" {
				left, _ := filepath.Glob(filepath.Join(filepath.Dir(strings.TrimPrefix(url, "sqlite:")), ".annals-scratch-*"))
				if len(left) > 0 {
					t.Errorf("scratch files left behind: %v", left)
				}
			}
		})
	}
	t.Run("memory", func(t *testing.T) {
		cli(t, nil, "crash-test", "--store", "memory:").want(t, 2, nil, []string{"nothing to check after a kill"})
	})
}

// TestCrashTestInterrupted: Ctrl-C in the middle of a crash test ends it
// after the cycle under way, with exit code 130 and "interrupted", never
// OK; the summary covers whole cycles only, so every event acknowledged in
// them is among those stored.
func TestCrashTestInterrupted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), annalsBin, "crash-test", "--store", "sqlite:"+filepath.Join(dir, "user.db"),
		"--cycles", "1000", "--entities", "20", "--max-run", "200ms", "--json")
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a few cycles, or the first under way
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	r := result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
	if r.code != exitInterrupted || !strings.Contains(r.stderr, "annals crash-test: interrupted") || saysOK.MatchString(r.stderr) {
		t.Fatalf("crash-test interrupted: want exit 130, \"interrupted\", no OK; got %s", r)
	}
	if r.stdout != "" { // a cycle was checked in full
		var out struct {
			Cycles             int64 `json:"cycles"`
			AcknowledgedEvents int64 `json:"acknowledged_events"`
			StoredEvents       int64 `json:"stored_events"`
			Interrupted        bool  `json:"interrupted"`
			OK                 bool  `json:"ok"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%v: %s", err, r)
		}
		if !out.Interrupted || out.OK || out.Cycles < 1 || out.StoredEvents < out.AcknowledgedEvents {
			t.Errorf("interrupted crash-test's summary %+v: want interrupted, not ok, whole cycles (stored ≥ acknowledged)", out)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".annals-scratch-*")); len(left) > 0 {
		t.Errorf("scratch files left behind: %v", left)
	}
}

// TestCrashVerifyFinds: the checks after a kill find each kind of damage,
// made here through the store's own API on an entity with three
// acknowledged writes (events 1–3, 4, 5–7).
func TestCrashVerifyFinds(t *testing.T) {
	reg, err := crashRegistry()
	if err != nil {
		t.Fatal(err)
	}
	pid := annals.PersistenceID(crashEntityType, crashEntityID(0))
	event := func(seq int64, ev crashEvent) journal.Repr {
		r := journal.Repr{PersistenceID: pid, SequenceNr: seq, WriterID: "test"}
		if r.Payload, r.SerializerID, r.Manifest, err = reg.Serialize(ev); err != nil {
			t.Fatal(err)
		}
		return r
	}
	write := func(t *testing.T, s *stores.Store, evs ...journal.Repr) {
		t.Helper()
		if res, err := s.Journal.Write(t.Context(), []journal.AtomicWrite{{PersistenceID: pid, Events: evs}}); err != nil || res != nil {
			t.Fatalf("write: %v %v", res, err)
		}
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, s *stores.Store, acks []crashAck) []crashAck
		want   func(crashTally) int64
	}{
		{"nothing", func(t *testing.T, s *stores.Store, acks []crashAck) []crashAck { return acks }, func(crashTally) int64 { return 0 }},
		{"lost", func(t *testing.T, s *stores.Store, acks []crashAck) []crashAck {
			return append(acks, crashAck{token: "acknowledged-never-stored", last: 8, size: 1})
		}, func(t crashTally) int64 { return t.lost }},
		{"duplicated", func(t *testing.T, s *stores.Store, acks []crashAck) []crashAck {
			write(t, s, event(8, crashEvent{Token: "w2", Index: 0, Size: 1}))
			return acks
		}, func(t crashTally) int64 { return t.duplicated }},
		{"half-written", func(t *testing.T, s *stores.Store, acks []crashAck) []crashAck {
			write(t, s, event(8, crashEvent{Token: "w4", Index: 0, Size: 3}), event(9, crashEvent{Token: "w4", Index: 1, Size: 3}))
			return acks
		}, func(t crashTally) int64 { return t.halfWritten }},
		{"gaps", func(t *testing.T, s *stores.Store, acks []crashAck) []crashAck {
			write(t, s, event(9, crashEvent{Token: "w4", Index: 0, Size: 1}))
			return acks
		}, func(t crashTally) int64 { return t.gaps }},
		{"recovery", func(t *testing.T, s *stores.Store, acks []crashAck) []crashAck {
			payload, id, manifest, err := reg.Serialize(crashState{Events: 7, Hash: 42})
			if err != nil {
				t.Fatal(err)
			}
			snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: 7}, Payload: payload, SerializerID: id, Manifest: manifest}
			if err := s.Snapshots.Save(t.Context(), snap); err != nil {
				t.Fatal(err)
			}
			return acks
		}, func(t crashTally) int64 { return t.mismatches }},
		{"refused-stored", func(t *testing.T, s *stores.Store, acks []crashAck) []crashAck {
			return append(acks, crashAck{token: "w2", refused: true}) // w2 is stored
		}, func(t crashTally) int64 { return t.refusedStored }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := stores.New().Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "c.db"), stores.Create)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			cfg := crashConfig{entities: 1, snapshotEvery: 100}
			h, stop, err := crashHost(s, cfg.snapshotEvery)
			if err != nil {
				t.Fatal(err)
			}
			var acks []crashAck
			for i, size := range []int{3, 1, 3} {
				token := []string{"w1", "w2", "w3"}[i]
				last, err := entity.Ask(t.Context(), h, crashEntityID(0), func(r entity.ReplyTo[int64]) crashCommand {
					return crashWrite{Token: token, Size: size, Reply: r}
				})
				if err != nil {
					t.Fatal(err)
				}
				acks = append(acks, crashAck{token: token, last: last, size: int64(size)})
			}
			stop()
			acks = c.damage(t, s, acks)
			var tally crashTally
			if err := crashVerify(context.WithoutCancel(t.Context()), s, cfg, map[string][]crashAck{crashEntityID(0): acks}, &tally); err != nil {
				t.Fatal(err)
			}
			problems, _ := json.Marshal(tally.problems)
			if c.name == "nothing" {
				if !tally.ok() || tally.stored != 7 {
					t.Errorf("an undamaged journal: %+v %s; want ok, 7 events stored", tally, problems)
				}
				return
			}
			if got := c.want(tally); got != 1 || tally.ok() || len(tally.problems) == 0 {
				t.Errorf("%s: counted %d (tally %+v, problems %s); want 1, named", c.name, got, tally, problems)
			}
		})
	}
}
