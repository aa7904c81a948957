package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/annals-go/annals/snapshot"
)

type snapshotRule struct {
	name string
	rule string
	run  func(t tb, s snapshot.Store)
}

// snapshotRules is the snapshots suite: the rules of snapshot.Store over
// s.Snapshots (those of Akka's SnapshotStoreSpec, and more), and
// CloseEndsCalls over an instance of s.Open's.
func snapshotRules(s Store) []rule {
	var rules []rule
	for _, r := range snapshotCases() {
		rules = append(rules, rule{r.name, r.rule, func(t tb) { r.run(t, s.Snapshots) }})
	}
	return append(rules, rule{"CloseEndsCalls", "calls after Close fail with an error wrapping snapshot.ErrClosed, and a second Close is harmless", func(t tb) {
		ss := own(t, s).Snapshots
		if ss == nil {
			t.Fatal("storetest: the Store that Store.Open returned has no Snapshots")
		}
		pid, metas := saveFive(t, ss)
		if err := ss.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := ss.Close(); err != nil {
			t.Errorf("a second Close: %v, want nil", err)
		}
		ctx := testContext(t)
		_, _, loadErr := ss.Load(ctx, pid, snapshot.Latest())
		for call, err := range map[string]error{
			"Load":           loadErr,
			"Save":           ss.Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: 9}, Payload: []byte("x")}),
			"Delete":         ss.Delete(ctx, metas[0]),
			"DeleteMatching": ss.DeleteMatching(ctx, pid, snapshot.Latest()),
		} {
			if !errors.Is(err, snapshot.ErrClosed) {
				t.Errorf("%s after Close: %v, want an error wrapping snapshot.ErrClosed", call, err)
			}
		}
	}})
}

// saveFive saves snapshots at sequence numbers 1..5 of a new id, one second
// apart, as Akka's SnapshotStoreSpec does before each case, and returns their
// metadata (index i holds sequence number i+1).
func saveFive(t tb, s snapshot.Store) (string, []snapshot.Metadata) {
	t.Helper()
	pid := uniqueID(t, "KitSnapshot")
	base := time.Now().Add(-time.Hour).Truncate(time.Microsecond).UTC()
	md := make([]snapshot.Metadata, 5)
	for i := range md {
		md[i] = snapshot.Metadata{PersistenceID: pid, SequenceNr: int64(i + 1), Timestamp: base.Add(time.Duration(i) * time.Second)}
		save(t, s, snapshot.Snapshot{Metadata: md[i], Payload: payloadFor(md[i]), SerializerID: 4, Manifest: "s"})
	}
	return pid, md
}

func payloadFor(m snapshot.Metadata) []byte {
	return fmt.Appendf(nil, "state-%s-%d", m.PersistenceID, m.SequenceNr)
}

func save(t tb, s snapshot.Store, snap snapshot.Snapshot) {
	t.Helper()
	if err := s.Save(testContext(t), snap); err != nil {
		t.Fatalf("Save(%s, %d): %v", snap.Metadata.PersistenceID, snap.Metadata.SequenceNr, err)
	}
}

// load returns the sequence number of the snapshot c selects, 0 for none.
func load(t tb, s snapshot.Store, pid string, c snapshot.Criteria) (snapshot.Snapshot, int64) {
	t.Helper()
	got, ok, err := s.Load(testContext(t), pid, c)
	if err != nil {
		t.Fatalf("Load(%+v): %v", c, err)
	}
	if !ok {
		return got, 0
	}
	return got, got.Metadata.SequenceNr
}

func snapshotCases() []snapshotRule {
	type loadCase struct {
		name, rule string
		criteria   func(md []snapshot.Metadata) snapshot.Criteria
		want       int64
	}
	loads := []loadCase{
		{"NoMatchForTimestampCriteria", "no snapshot is loaded when none is as old as MaxTimestamp", func([]snapshot.Metadata) snapshot.Criteria {
			return snapshot.Criteria{MaxSequenceNr: math.MaxInt64, MaxTimestamp: time.UnixMilli(100)}
		}, 0},
		{"NoMatchForSequenceCriteria", "no snapshot is loaded when MaxSequenceNr is below every snapshot (and None selects nothing)", func([]snapshot.Metadata) snapshot.Criteria {
			return snapshot.None()
		}, 0},
		{"LoadLatest", "Latest loads the snapshot with the highest sequence number", func([]snapshot.Metadata) snapshot.Criteria {
			return snapshot.Latest()
		}, 5},
		{"LoadUpperSequenceBound", "the youngest snapshot at or below MaxSequenceNr is loaded", func([]snapshot.Metadata) snapshot.Criteria {
			return snapshot.Criteria{MaxSequenceNr: 3}
		}, 3},
		{"LoadUpperSequenceAndTimestampBounds", "the youngest snapshot within both MaxSequenceNr and MaxTimestamp is loaded", func(md []snapshot.Metadata) snapshot.Criteria {
			return snapshot.Criteria{MaxSequenceNr: 13, MaxTimestamp: md[1].Timestamp}
		}, 2},
		{"LoadEqualSequenceAndTimestampBounds", "bounds equal to a snapshot's own sequence number and timestamp select it", func(md []snapshot.Metadata) snapshot.Criteria {
			return snapshot.Criteria{MaxSequenceNr: md[2].SequenceNr, MaxTimestamp: md[2].Timestamp}
		}, 3},
		{"LoadLowerBounds", "snapshots below MinSequenceNr or older than MinTimestamp are not loaded", func(md []snapshot.Metadata) snapshot.Criteria {
			return snapshot.Criteria{MaxSequenceNr: 2, MinSequenceNr: 2, MinTimestamp: md[1].Timestamp}
		}, 2},
	}
	var rules []snapshotRule
	for _, c := range loads {
		rules = append(rules, snapshotRule{c.name, c.rule, func(t tb, s snapshot.Store) {
			pid, md := saveFive(t, s)
			crit := c.criteria(md)
			got, seq := load(t, s, pid, crit)
			if seq != c.want {
				t.Fatalf("Load(%+v) selected sequence number %d, want %d (0 = none)", crit, seq, c.want)
			}
			if seq > 0 {
				want := md[seq-1]
				if !got.Metadata.Timestamp.Equal(want.Timestamp) || !bytes.Equal(got.Payload, payloadFor(want)) || got.SerializerID != 4 || got.Manifest != "s" {
					t.Errorf("loaded snapshot %+v (payload %q), want metadata %+v and its payload", got.Metadata, got.Payload, want)
				}
			}
		}})
	}
	rules = append(rules,
		snapshotRule{"InvalidID", "no snapshot is loaded for an id that has none", invalidID},
		snapshotRule{"NoneSkipsSnapshotAtZero", "None selects no snapshot, not even one saved at sequence number 0; Latest selects that one", noneSkipsSnapshotAtZero},
		snapshotRule{"DeleteOneByMetadata", "Delete removes the one snapshot its metadata names", deleteOneByMetadata},
		snapshotRule{"DeleteBySequenceWithZeroTimestamp", "Delete with a zero timestamp removes the snapshot at that sequence number whatever its timestamp", deleteBySequenceWithZeroTimestamp},
		snapshotRule{"DeleteWithOtherTimestampKeeps", "Delete with a timestamp that differs from the stored one removes nothing", deleteWithOtherTimestampKeeps},
		snapshotRule{"DeleteMatching", "DeleteMatching removes every snapshot within the criteria's upper sequence and timestamp bounds", deleteMatching},
		snapshotRule{"DeleteMatchingKeepsNonMatchingTimestamps", "DeleteMatching keeps snapshots outside its upper timestamp bound", deleteMatchingKeepsNonMatchingTimestamps},
		snapshotRule{"OverwriteSameSequenceNr", "saving a snapshot with a stored id and sequence number overwrites it", overwriteSameSequenceNr},
		snapshotRule{"LargeSnapshot", "a 10,000-byte snapshot is stored and loaded byte for byte", largeSnapshot},
		snapshotRule{"ExtremeTimestampBounds", "criteria with timestamps far in the past or future select as their meaning says", extremeTimestampBounds},
		snapshotRule{"InvalidArguments", "invalid arguments fail with ErrInvalidArgument and change nothing", snapshotInvalidArguments},
	)
	return rules
}

// noneSkipsSnapshotAtZero: a snapshot saved at 0 (the state before any
// event) is selected by Latest and not by None.
func noneSkipsSnapshotAtZero(t tb, s snapshot.Store) {
	pid := uniqueID(t, "KitSnapshot")
	save(t, s, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: 0, Timestamp: time.Now().Add(-time.Minute)}, Payload: []byte("empty"), SerializerID: 4, Manifest: "s"})
	if _, ok, err := s.Load(testContext(t), pid, snapshot.None()); err != nil || ok {
		t.Errorf("Load(None) = found %v, %v; want no snapshot", ok, err)
	}
	if got, ok, err := s.Load(testContext(t), pid, snapshot.Latest()); err != nil || !ok || got.Metadata.SequenceNr != 0 || string(got.Payload) != "empty" {
		t.Errorf("Load(Latest) = %+v, found %v, %v; want the snapshot at 0", got.Metadata, ok, err)
	}
}

// invalidID: no snapshot is loaded for an id that has none.
func invalidID(t tb, s snapshot.Store) {
	saveFive(t, s)
	if _, seq := load(t, s, uniqueID(t, "KitSnapshot"), snapshot.Latest()); seq != 0 {
		t.Errorf("loaded sequence number %d for an unknown id, want none", seq)
	}
}

// deleteOneByMetadata: Delete removes the one snapshot its metadata names.
func deleteOneByMetadata(t tb, s snapshot.Store) {
	pid, md := saveFive(t, s)
	if err := s.Delete(testContext(t), md[1]); err != nil {
		t.Fatal(err)
	}
	if _, seq := load(t, s, pid, snapshot.Criteria{MaxSequenceNr: md[1].SequenceNr, MaxTimestamp: md[1].Timestamp}); seq != 1 {
		t.Errorf("after deleting 2, load up to 2 selected %d, want 1", seq)
	}
	if _, seq := load(t, s, pid, snapshot.Latest()); seq != 5 {
		t.Errorf("after deleting 2, latest is %d, want 5", seq)
	}
}

// deleteBySequenceWithZeroTimestamp: Delete with a zero timestamp removes the snapshot at that sequence number whatever its timestamp.
func deleteBySequenceWithZeroTimestamp(t tb, s snapshot.Store) {
	pid, _ := saveFive(t, s)
	if err := s.Delete(testContext(t), snapshot.Metadata{PersistenceID: pid, SequenceNr: 5}); err != nil {
		t.Fatal(err)
	}
	if _, seq := load(t, s, pid, snapshot.Latest()); seq != 4 {
		t.Errorf("after deleting 5, latest is %d, want 4", seq)
	}
}

// deleteWithOtherTimestampKeeps: Delete with a timestamp that differs from the stored one removes nothing.
func deleteWithOtherTimestampKeeps(t tb, s snapshot.Store) {
	pid, md := saveFive(t, s)
	m := md[4]
	m.Timestamp = m.Timestamp.Add(time.Millisecond)
	if err := s.Delete(testContext(t), m); err != nil {
		t.Fatal(err)
	}
	if _, seq := load(t, s, pid, snapshot.Latest()); seq != 5 {
		t.Errorf("latest is %d, want 5 (kept)", seq)
	}
}

// deleteMatching: DeleteMatching removes every snapshot within the criteria's upper sequence and timestamp bounds.
func deleteMatching(t tb, s snapshot.Store) {
	pid, md := saveFive(t, s)
	c := snapshot.Criteria{MaxSequenceNr: md[2].SequenceNr, MaxTimestamp: md[2].Timestamp}
	if err := s.DeleteMatching(testContext(t), pid, c); err != nil {
		t.Fatal(err)
	}
	if _, seq := load(t, s, pid, c); seq != 0 {
		t.Errorf("after DeleteMatching, load with the same criteria selected %d, want none", seq)
	}
	if _, seq := load(t, s, pid, snapshot.Latest()); seq != 5 {
		t.Errorf("after DeleteMatching, latest is %d, want 5", seq)
	}
	if _, seq := load(t, s, pid, snapshot.Criteria{MaxSequenceNr: 4}); seq != 4 {
		t.Errorf("snapshot 4 is gone; DeleteMatching must keep snapshots outside the criteria")
	}
}

// deleteMatchingKeepsNonMatchingTimestamps: DeleteMatching keeps snapshots outside its upper timestamp bound.
func deleteMatchingKeepsNonMatchingTimestamps(t tb, s snapshot.Store) {
	pid, md := saveFive(t, s)
	c := snapshot.Criteria{MaxSequenceNr: md[2].SequenceNr, MaxTimestamp: md[1].Timestamp.Add(-time.Millisecond)}
	if err := s.DeleteMatching(testContext(t), pid, c); err != nil {
		t.Fatal(err)
	}
	if _, seq := load(t, s, pid, snapshot.Criteria{MaxSequenceNr: 3}); seq != 3 {
		t.Errorf("load up to 3 selected %d, want 3 (not matched, kept)", seq)
	}
	if _, seq := load(t, s, pid, snapshot.Criteria{MaxSequenceNr: 1}); seq != 0 {
		t.Errorf("snapshot 1 matched and must be deleted, still loaded")
	}
}

// overwriteSameSequenceNr: saving a snapshot with a stored id and sequence number overwrites it.
func overwriteSameSequenceNr(t tb, s snapshot.Store) {
	pid, md := saveFive(t, s)
	m := md[3]
	m.Timestamp = m.Timestamp.Add(time.Minute)
	save(t, s, snapshot.Snapshot{Metadata: m, Payload: []byte("overwritten"), SerializerID: 33, Manifest: "v2"})
	got, seq := load(t, s, pid, snapshot.Criteria{MaxSequenceNr: 4})
	if seq != 4 || string(got.Payload) != "overwritten" || got.SerializerID != 33 || got.Manifest != "v2" || !got.Metadata.Timestamp.Equal(m.Timestamp) {
		t.Errorf("loaded %+v payload %q, want the overwritten snapshot", got.Metadata, got.Payload)
	}
}

// largeSnapshot: a 10,000-byte snapshot is stored and loaded byte for byte.
func largeSnapshot(t tb, s snapshot.Store) {
	pid := uniqueID(t, "KitSnapshot")
	payload := make([]byte, 10_000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	save(t, s, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: 100}, Payload: payload, SerializerID: 4})
	got, seq := load(t, s, pid, snapshot.Latest())
	if seq != 100 || !bytes.Equal(got.Payload, payload) {
		t.Errorf("loaded %d bytes at %d, want the 10,000 saved at 100", len(got.Payload), seq)
	}
	if got.Metadata.Timestamp.IsZero() || got.Metadata.Timestamp.Location() != time.UTC {
		t.Errorf("a zero timestamp must be filled by the store and returned in UTC, got %v", got.Metadata.Timestamp)
	}
}

// extremeTimestampBounds: criteria with timestamps far in the past or future select as their meaning says.
func extremeTimestampBounds(t tb, s snapshot.Store) {
	pid, _ := saveFive(t, s)
	future, past := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, seq := load(t, s, pid, snapshot.Criteria{MaxSequenceNr: 10, MaxTimestamp: future}); seq != 5 {
		t.Errorf("MaxTimestamp in the year 3000 selected %d, want 5", seq)
	}
	if _, seq := load(t, s, pid, snapshot.Criteria{MaxSequenceNr: 10, MinTimestamp: past}); seq != 5 {
		t.Errorf("MinTimestamp in the year 1000 selected %d, want 5", seq)
	}
	if _, seq := load(t, s, pid, snapshot.Criteria{MaxSequenceNr: 10, MaxTimestamp: past}); seq != 0 {
		t.Errorf("MaxTimestamp in the year 1000 selected %d, want none", seq)
	}
	if err := s.DeleteMatching(testContext(t), pid, snapshot.Criteria{MaxSequenceNr: 10, MaxTimestamp: past}); err != nil {
		t.Fatal(err)
	}
	if _, seq := load(t, s, pid, snapshot.Latest()); seq != 5 {
		t.Errorf("deleting snapshots older than the year 1000 removed some: latest is %d, want 5", seq)
	}
}

// snapshotInvalidArguments: invalid arguments fail with ErrInvalidArgument and change nothing.
func snapshotInvalidArguments(t tb, s snapshot.Store) {
	ctx := testContext(t)
	pid := uniqueID(t, "KitSnapshot")
	calls := []struct {
		name string
		err  error
	}{
		{"Save empty id", s.Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{SequenceNr: 1}})},
		{"Save negative seq", s.Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: -1}})},
		{"Load empty id", func() error { _, _, err := s.Load(ctx, "", snapshot.Latest()); return err }()},
		{"Delete empty id", s.Delete(ctx, snapshot.Metadata{SequenceNr: 1})},
		{"DeleteMatching empty id", s.DeleteMatching(ctx, "", snapshot.Latest())},
	}
	for _, c := range calls {
		if !errors.Is(c.err, snapshot.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, c.err)
		}
	}
	if _, seq := load(t, s, pid, snapshot.Latest()); seq != 0 {
		t.Errorf("an invalid save stored snapshot %d", seq)
	}
}
