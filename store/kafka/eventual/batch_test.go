package eventual

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/annals-go/annals/store/kafka/wire"
)

// actions builds one key's records from a compact script: "a1-3" is an
// append of events 1..3, "d5" a delete to 5, "p" a purge, "m" a mark; the
// offset is the position in the script.
func actions(t *testing.T, script string) []ActionRecord {
	t.Helper()
	var out []ActionRecord
	for i, s := range strings.Fields(script) {
		r := ActionRecord{Offset: int64(i)}
		h := &r.Action.Header
		switch s[0] {
		case 'a':
			var from, to int64
			if _, err := fmt.Sscanf(s[1:], "%d-%d", &from, &to); err != nil {
				t.Fatalf("bad step %q", s)
			}
			h.Kind, h.From, h.To = wire.Append, from, to
		case 'd':
			h.Kind = wire.Delete
			fmt.Sscanf(s[1:], "%d", &h.To)
		case 'p':
			h.Kind = wire.Purge
		case 'm':
			h.Kind = wire.Mark
		}
		out = append(out, r)
	}
	return out
}

// describe prints batches compactly: "A@2[0 2]" is appends recorded at
// offset 2 holding the records at offsets 0 and 2; "D@3:5" a delete to 5
// at offset 3; "P@4" a purge.
func describe(bs []Batch) string {
	var parts []string
	for _, b := range bs {
		switch b.Kind {
		case Appends:
			var offs []int64
			for _, r := range b.Records {
				offs = append(offs, r.Offset)
			}
			parts = append(parts, fmt.Sprintf("A@%d%v", b.Offset, offs))
		case DeleteBatch:
			parts = append(parts, fmt.Sprintf("D@%d:%d", b.Offset, b.DeleteTo))
		case PurgeBatch:
			parts = append(parts, fmt.Sprintf("P@%d", b.Offset))
		}
	}
	return strings.Join(parts, " ")
}

func TestBatches(t *testing.T) {
	for _, c := range []struct {
		script, want string
	}{
		{"", ""},
		{"m m", ""},
		{"a1-1", "A@0[0]"},
		{"a1-1 a2-3 m a4-4", "A@3[0 1 3]"},
		{"a1-1 p", "P@1"},
		{"a1-1 p p", "P@2"},
		{"a1-1 p a1-2", "P@1 A@2[2]"},
		{"a1-2 d2", "A@0[0] D@1:2"},
		// The delete covers the first append wholly: it is dropped.
		{"a1-2 a3-4 d2", "A@1[1] D@2:2"},
		{"a1-2 a3-4 d3", "A@1[1] D@2:3"},
		{"a1-2 a3-4 d4", "A@1[1] D@2:4"},
		{"d2 d5", "D@1:5"},
		// A delete that covers the next one takes its place, at its own offset.
		{"d5 d2", "D@0:5"},
		{"a1-5 d2 d5", "A@0[0] D@2:5"},
		{"a1-5 d2 a6-6 d5", "A@2[2] D@3:5"},
		{"a1-3 d3 a4-4", "A@0[0] D@1:3 A@2[2]"},
		{"d3 p a1-1 d1", "P@1 A@2[2] D@3:1"},
	} {
		t.Run(c.script, func(t *testing.T) {
			if got := describe(Batches(actions(t, c.script))); got != c.want {
				t.Errorf("Batches(%s) = %q, want %q", c.script, got, c.want)
			}
		})
	}
}

func TestBatchesKeepsOffsetOrder(t *testing.T) {
	bs := Batches(actions(t, "a1-1 d1 a2-2 d2 a3-3 p a1-1 a2-2 d1"))
	var offs []int64
	for _, b := range bs {
		offs = append(offs, b.Offset)
	}
	if !slices.IsSorted(offs) {
		t.Errorf("batch offsets %v are not ascending (%s)", offs, describe(bs))
	}
}
