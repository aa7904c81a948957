package memory_test

import (
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

func TestBatchQueryCompliance(t *testing.T) {
	storetest.RunBatchQueries(t, storetest.QueryHarness{
		New: func(t *testing.T) (journal.Journal, any) {
			s := memory.New()
			t.Cleanup(func() { _ = s.Close() })
			return s.Journal(), s.Queries()
		},
	})
}
