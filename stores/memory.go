package stores

import (
	"fmt"
	"strings"

	"github.com/annals-go/annals/store/memory"
)

// openMemory opens "memory:": a new, empty store/memory store each time,
// gone when it is closed; its read model's transactions are *memory.Tx.
func openMemory(url string) (*Stack, error) {
	if err := memoryURL(url); err != nil {
		return nil, err
	}
	s := memory.New()
	return &Stack{
		Kind: "memory", Where: "memory (nothing survives the process)",
		Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(), Offsets: s.Projections(), ReadModelKind: "memory",
		Durable: s.DurableState(), Membership: s.Membership(), ReadModelMembership: s.Membership(),
		closers: []func() error{s.Close},
	}, nil
}

// memoryURL refuses anything after "memory:": the store has no place or
// parameters, so text there is a mistake (a path meant for sqlite:).
func memoryURL(url string) error {
	if _, rest, _ := strings.Cut(url, ":"); rest != "" {
		return BadURL(fmt.Errorf("memory URL %q: want memory: alone (the memory store has no path or parameters; sqlite:PATH is a file)", Redact(url)))
	}
	return nil
}
