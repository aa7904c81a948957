package cassandra_test

// Third review of the claims window (not run when written: the machine's
// cores were busy with benchmarks).

import (
	"testing"

	"github.com/annals-go/annals/journal"
)

// TestDeleteToWhileClaimBeingTaken: as TestDeleteToOfHiddenRows, but b's
// claim is paused while it reads the highest number (taken, not
// completed; it has read the deleted-to mark, 0, and partition 0's
// highest, 2). a's 3–4 land; c deletes the id up to the highest number
// it reads, a's 4. deletionReach finds no completed claim to write the
// tombstone of (rec.done is a's, or 0), and reads 4 at a quorum, so the
// mark moves to 4 and the range deletions are stamped at or above b's
// bound. b's claim then completes with H = 2 (it read the mark before c
// wrote it), and b's writes of 3 and 4 are acknowledged: both lie at or
// below the mark (and under the range deletions' timestamp), so no
// reader ever finds them. Acknowledged events lost.
func TestDeleteToWhileClaimBeingTaken(t *testing.T) {
	const pid = "DeletedWhileTaken|1"
	stores, resume := hiddenWindowAt(t, stmtHighest, pid, 3, nil)
	a, b, c := stores[0].Journal(), stores[1].Journal(), stores[2].Journal()
	if err := c.DeleteTo(t.Context(), pid, 4); err != nil {
		t.Fatal(err)
	}
	wantSettled(t, resume)
	if err := writeOne(t.Context(), b, payloaded(pid, "b", 4, 4)); err != nil {
		t.Fatalf("b's write of 4: %v", err)
	}
	for name, j := range map[string]journal.Journal{"a": a, "b": b, "c": c} {
		if got := writers(t, j, pid); got[3] != "b" || got[4] != "b" {
			t.Errorf("replay through %s: writers %v, want b's acknowledged 3 and 4", name, got)
		}
	}
}
