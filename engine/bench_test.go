package engine_test

import (
	"testing"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/memory"
)

// BenchmarkPersistOverhead measures what the front adds to one persist of a
// lone writer: the memory store's own cost beside the same writes through
// the front.
func BenchmarkPersistOverhead(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		j := memory.New().Journal()
		seq := int64(0)
		for b.Loop() {
			seq++
			if _, err := j.Write(b.Context(), []journal.AtomicWrite{one("p", seq)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("front", func(b *testing.B) {
		f, _ := engine.NewFront(memory.New().Journal(), engine.Config{})
		defer f.Close()
		seq := int64(0)
		for b.Loop() {
			seq++
			if err := f.Persist(b.Context(), one("p", seq)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
