package postgres_test

import (
	"os"
	"testing"

	"github.com/annals-go/annals/internal/outagetest"
)

// TestOutageDrill runs the outage drill (package internal/outagetest) on
// PostgreSQL: the server of scripts/services is stopped for 15 s while 32
// callers deposit into 200 accounts, then started again; writes must
// resume in this same process. It stops the server of
// ANNALS_SERVICES_DIR, by default the shared one, so it runs only when
// asked, alone:
//
//	ANNALS_OUTAGE_DRILL=1 go test ./store/postgres -run TestOutageDrill -v
func TestOutageDrill(t *testing.T) {
	if os.Getenv("ANNALS_OUTAGE_DRILL") == "" {
		t.Skip("stops the shared PostgreSQL server: set ANNALS_OUTAGE_DRILL=1 and run it alone")
	}
	s := open(t)
	outagetest.Run(t, outagetest.Config{
		Journal:   s.Journal(),
		Snapshots: s.Snapshots(),
		Services:  outagetest.Services(t, "../../scripts/services", "postgres"),
		Probe:     outagetest.WriteProbe(s.Journal()),
	})
}
