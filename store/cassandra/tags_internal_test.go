package cassandra

import "testing"

// TestTagStatesHeldAreKept: dropping states beyond maxCachedIDs leaves
// those held (a write or recovery of the id in progress), so that no
// second state of the id is used beside them; a dropped state is marked,
// and the id's next use gets a new one.
func TestTagStatesHeldAreKept(t *testing.T) {
	tw := &tagWriters{ids: map[string]*idTags{}}
	held := tw.state("held")
	for _, id := range []string{"a", "b", "c"} {
		tw.state(id).mu.Unlock()
	}
	a := tw.ids["a"]
	tw.mu.Lock()
	tw.dropStates(4)
	tw.mu.Unlock()
	if len(tw.ids) != 1 || tw.ids["held"] != held {
		t.Fatalf("after dropping: %d states, held kept %v; want only the held one", len(tw.ids), tw.ids["held"] == held)
	}
	if held.dropped || !a.dropped {
		t.Fatalf("dropped marks: held %v, a %v; want false, true", held.dropped, a.dropped)
	}
	held.mu.Unlock()
	again := tw.state("a")
	defer again.mu.Unlock()
	if again == a || again.dropped {
		t.Fatal("the id of a dropped state got the dropped state again")
	}
	if got := tw.state("held"); got != held {
		t.Fatal("the held state was replaced")
	} else {
		got.mu.Unlock()
	}
}
