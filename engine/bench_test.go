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
	for _, c := range []struct {
		name  string
		hooks []any
	}{
		{"front", nil},
		{"front-with-write-hook", []any{noopHook{}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, _ := engine.NewFront(memory.New().Journal(), engine.Config{Hooks: c.hooks})
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
}

// noopHook is a write-call hook that does nothing: the cost of a hook is
// the call and the WriteCall it is given.
type noopHook struct{}

func (noopHook) OnWriteCall(engine.WriteCall) {}
