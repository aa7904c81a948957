package postgres_test

import (
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/storetest"
)

// TestBatchQueryKit runs the batch query kit (one Write call of 1,000 ids)
// on Annals' layout in both orderings and on the r2dbc layout.
func TestBatchQueryKit(t *testing.T) {
	t.Parallel()
	layouts := append(orderings[:len(orderings):len(orderings)], struct {
		name string
		opts []postgres.Option
	}{"r2dbc", r2dbcOpts})
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, l.opts...)
			storetest.RunBatchQueries(t, storetest.QueryHarness{New: func(t *testing.T) (journal.Journal, any) { return s.Journal(), s.Queries() }})
		})
	}
}
