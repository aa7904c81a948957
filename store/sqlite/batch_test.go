package sqlite_test

import (
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/storetest"
)

func TestBatchQueryCompliance(t *testing.T) {
	storetest.RunBatchQueries(t, storetest.QueryHarness{
		New: func(t *testing.T) (journal.Journal, any) {
			s := openTemp(t)
			return s.Journal(), s.Queries()
		},
	})
}
