package entity

import "testing"

// TestYielderLearnsFromOutcomes: yields that find no command make the
// host's entities stop yielding, but for one probe in yieldProbe; yields
// that find one bring them back; the score stays within its bound.
func TestYielderLearnsFromOutcomes(t *testing.T) {
	var y yielder
	if !y.try() {
		t.Fatal("a new host's entities do not yield")
	}
	for range 3 * yieldScoreBound {
		y.found(false)
	}
	if got := y.score.Load(); got != -yieldScoreBound {
		t.Fatalf("score after many wasted yields = %d, want %d", got, -yieldScoreBound)
	}
	tries := 0
	for range 8 * yieldProbe {
		if y.try() {
			tries++
		}
	}
	if tries != 8 {
		t.Errorf("with wasted yields, %d of %d idle entities yielded, want 8 (one in %d)", tries, 8*yieldProbe, yieldProbe)
	}
	for range yieldScoreBound {
		y.found(true)
	}
	if !y.try() {
		t.Error("after yields that found commands, entities do not yield")
	}
	for range 3 * yieldScoreBound {
		y.found(true)
	}
	if got := y.score.Load(); got != yieldScoreBound {
		t.Errorf("score after many useful yields = %d, want %d", got, yieldScoreBound)
	}
}
