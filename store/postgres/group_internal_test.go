package postgres

import (
	"slices"
	"testing"

	"github.com/annals-go/annals/journal"
)

// TestGroupByID: the writes of each id become adjacent, in their order,
// the ids in order of first appearance; a call with no id written twice
// keeps its order.
func TestGroupByID(t *testing.T) {
	for _, c := range []struct {
		name    string
		ids     []string // of writes[0…]
		pending []int
		want    []int
	}{
		{"distinct", []string{"a", "b", "c"}, []int{0, 1, 2}, []int{0, 1, 2}},
		{"repeated", []string{"a", "b", "a", "c", "b", "a"}, []int{0, 1, 2, 3, 4, 5}, []int{0, 2, 5, 1, 4, 3}},
		{"a subset", []string{"a", "b", "a", "c", "b"}, []int{1, 2, 4}, []int{1, 4, 2}},
		{"already grouped", []string{"a", "a", "b"}, []int{0, 1, 2}, []int{0, 1, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			writes := make([]journal.AtomicWrite, len(c.ids))
			for i, id := range c.ids {
				writes[i] = journal.AtomicWrite{PersistenceID: id}
			}
			if got := groupByID(writes, c.pending); !slices.Equal(got, c.want) {
				t.Errorf("order %v, want %v", got, c.want)
			}
		})
	}
}
