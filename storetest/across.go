package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/annals-go/annals/journal"
)

// RunJournalAcross runs the rules of journal.Journal that hold between
// two journal values on one database, as two processes hold them (two
// pools, two sessions, two opens of one file), one named, parallel
// subtest of t per rule: a writer that goes on after the other wrote the
// id is refused, and writers racing through both leave each id one chain
// that holds every acknowledged write and no refused one. The rules use
// ids of their own.
func RunJournalAcross(t *testing.T, a, b journal.Journal) {
	t.Helper()
	tt, j := testingT{t}, [2]journal.Journal{a, b}
	for _, r := range []rule{
		{"StaleWriterRefused", "a write of a number the other instance stored since, and of the next free number by a writer that saw neither, is refused with a *ConflictError and not stored; the writer's next write after reading again is stored", func(t tb) {
			staleAcross(t, j, uniqueID(t, "KitAcross"))
		}},
		{"RacingWritersOneChain", "writers racing through both instances for the same ids leave each id numbered 1..n once, every acknowledged write stored as written, no refused one", func(t tb) {
			racingAcross(t, j)
		}},
	} {
		runRule(tt, r, "")
	}
}

// writeAlone writes w alone and returns its outcome: nil (stored), its
// rejection, or the call's error (unknown).
func writeAlone(t tb, j journal.Journal, w journal.AtomicWrite) (rejected, unknown error) {
	res, err := j.Write(testContext(t), []journal.AtomicWrite{w})
	if err != nil {
		return nil, err
	}
	if len(res) > 0 {
		return res[0], nil
	}
	return nil, nil
}

// by returns pid's events from..to written by writer (payload and writer
// id name it).
func by(pid, writer string, from, to int64) journal.AtomicWrite {
	w := atomicRange(pid, from, to)
	for i := range w.Events {
		w.Events[i].WriterID = writer
		w.Events[i].Payload = fmt.Appendf(nil, `"%s:%d"`, writer, w.Events[i].SequenceNr)
	}
	return w
}

// writersOf replays pid through j and returns each number's writer id,
// failing t on a number replayed twice.
func writersOf(t tb, j journal.Journal, pid string) map[int64]string {
	t.Helper()
	got := map[int64]string{}
	for e, err := range j.Replay(testContext(t), pid, 1, maxSeq, maxSeq) {
		if err != nil {
			t.Fatalf("Replay: %v", err)
		}
		if _, dup := got[e.SequenceNr]; dup {
			t.Errorf("%s: event %d replayed twice", pid, e.SequenceNr)
		}
		if want := fmt.Sprintf(`"%s:%d"`, e.WriterID, e.SequenceNr); string(e.Payload) != want {
			t.Errorf("%s: event %d has payload %s, want %s (its writer id's)", pid, e.SequenceNr, e.Payload, want)
		}
		got[e.SequenceNr] = e.WriterID
	}
	return got
}

func staleAcross(t tb, j [2]journal.Journal, pid string) {
	if rej, err := writeAlone(t, j[0], by(pid, "a", 1, 2)); rej != nil || err != nil {
		t.Fatalf("a's first write: %v %v", rej, err)
	}
	if rej, err := writeAlone(t, j[1], by(pid, "b", 3, 3)); rej != nil || err != nil {
		t.Fatalf("b's write of 3: %v %v", rej, err)
	}
	// a goes on from its own highest number, 2: 3 is b's.
	var ce *journal.ConflictError
	if rej, err := writeAlone(t, j[0], by(pid, "a", 3, 4)); err != nil || !errors.As(rej, &ce) || !errors.Is(rej, journal.ErrRejected) {
		t.Fatalf("a's write of 3–4 after b's 3: rejected %v, unknown %v; want a *ConflictError", rej, err)
	}
	// b, which saw only its own 3, refused at 2; then a writes the next
	// free number, 4.
	if rej, err := writeAlone(t, j[1], by(pid, "b", 2, 2)); err != nil || !errors.Is(rej, journal.ErrSequenceConflict) {
		t.Fatalf("b's write of 2: rejected %v, unknown %v; want ErrSequenceConflict", rej, err)
	}
	if rej, err := writeAlone(t, j[0], by(pid, "a", 4, 4)); rej != nil || err != nil {
		t.Fatalf("a's write of 4, the next free number: %v %v", rej, err)
	}
	want := map[int64]string{1: "a", 2: "a", 3: "b", 4: "a"}
	for i, jj := range j {
		if got := writersOf(t, jj, pid); !maps.Equal(got, want) {
			t.Errorf("replay through instance %d: writers %v, want %v", i, got, want)
		}
		if n := highest(t, jj, pid, 0); n != 4 {
			t.Errorf("highest through instance %d = %d, want 4", i, n)
		}
	}
}

// racingAcross: two writers per id, one through each instance, each
// writing the number after the highest it reads until the id holds
// racedEvents; every outcome is recorded and checked against the final
// journal, read through both instances.
func racingAcross(t tb, j [2]journal.Journal) {
	const ids, racedEvents = 4, 12
	var (
		mu       sync.Mutex
		outcomes = map[string][]raceOutcome{}
		wg       sync.WaitGroup
		pids     []string
	)
	for range ids {
		pids = append(pids, uniqueID(t, "KitAcross"))
	}
	for _, pid := range pids {
		for w := range 2 {
			writer := fmt.Sprintf("w%d", w)
			wg.Go(func() {
				for attempt := 0; attempt < 20*racedEvents; attempt++ {
					n, err := j[w].HighestSequenceNr(testContext(t), pid, 0)
					if err != nil {
						t.Errorf("%s: highest: %v", writer, err)
						return
					}
					if n >= racedEvents {
						return
					}
					rej, unk := writeAlone(t, j[w], by(pid, writer, n+1, n+1))
					if rej != nil && !errors.Is(rej, journal.ErrSequenceConflict) {
						t.Errorf("%s: write of %d refused with %v, want ErrSequenceConflict or stored", writer, n+1, rej)
						return
					}
					mu.Lock()
					outcomes[pid] = append(outcomes[pid], raceOutcome{writer, n + 1, rej != nil, unk != nil})
					mu.Unlock()
				}
				t.Errorf("%s: %s did not reach %d events in %d attempts", pid, writer, racedEvents, 20*racedEvents)
			})
		}
	}
	wg.Wait()
	refused, unknown := 0, 0
	for _, os := range outcomes {
		for _, o := range os {
			refused += b2i(o.rejected)
			unknown += b2i(o.unknown)
		}
	}
	t.Logf("%d writes refused, %d of unknown outcome", refused, unknown)
	for _, pid := range pids {
		got := writersOf(t, j[0], pid)
		if other := writersOf(t, j[1], pid); !maps.Equal(got, other) {
			t.Errorf("%s: the instances replay %v and %v", pid, got, other)
		}
		if numbers := slices.Sorted(maps.Keys(got)); !slices.Equal(numbers, seqs(1, int64(len(numbers)))) || int64(len(numbers)) < racedEvents {
			t.Errorf("%s: numbers %v, want 1..n with n ≥ %d", pid, numbers, racedEvents)
		}
		for _, o := range outcomes[pid] {
			switch {
			case o.unknown:
			case o.rejected && got[o.seq] == o.writer:
				// The writer may own the number by a later write of it:
				// only a refusal of its only write of the number fails.
				if !wroteAgain(outcomes[pid], o) {
					t.Errorf("%s: %s's write of %d was refused but is stored", pid, o.writer, o.seq)
				}
			case !o.rejected && got[o.seq] != o.writer:
				t.Errorf("%s: %s's write of %d was acknowledged, but the number holds %q's", pid, o.writer, o.seq, got[o.seq])
			}
		}
	}
}

// raceOutcome is one write of racingAcross: its writer, number, and
// whether it was refused or its outcome unknown.
type raceOutcome struct {
	writer            string
	seq               int64
	rejected, unknown bool
}

// wroteAgain reports whether o's writer wrote o's number again with an
// outcome other than a refusal.
func wroteAgain(all []raceOutcome, o raceOutcome) bool {
	for _, x := range all {
		if x.writer == o.writer && x.seq == o.seq && !x.rejected {
			return true
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
