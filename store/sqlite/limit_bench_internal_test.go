package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
)

// BenchmarkLimitParameter: the recovery's replay statement (replaySQL,
// whose limit is LIMIT +?) beside the same statement with a bare LIMIT ?,
// which SQLite compiles again at every binding (see readerStmtCache):
// 1,000 ids of 10 events written through the store, each id's events read
// through the driver (rows not decoded), the two statements in turns;
// reports each one's time per read:
//
//	go test -run '^$' -bench LimitParameter -benchtime 20x ./store/sqlite/
func BenchmarkLimitParameter(b *testing.B) {
	const ids, events = 1000, 10
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "limit.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var writes []journal.AtomicWrite
	for e := range ids {
		w := journal.AtomicWrite{PersistenceID: fmt.Sprint("Account|limit-", e)}
		for q := range events {
			w.Events = append(w.Events, journal.Repr{PersistenceID: w.PersistenceID, SequenceNr: int64(q + 1), Payload: []byte(`{"amount":1}`), SerializerID: 1, Manifest: "m"})
		}
		writes = append(writes, w)
	}
	if res, err := s.Journal().Write(ctx, writes); err != nil || res != nil {
		b.Fatal(res, err)
	}
	statements := []struct{ name, text string }{
		{"limit-plus", replaySQL},
		{"limit-bare", strings.Replace(replaySQL, "LIMIT +?", "LIMIT ?", 1)},
	}
	if statements[0].text == statements[1].text {
		b.Fatal("replaySQL has no LIMIT +?")
	}
	var took [2]time.Duration
	run := func(k int) {
		start := time.Now()
		for e := range ids {
			args, err := namedArgs(fmt.Sprint("Account|limit-", e), int64(1), int64(events), int64(events))
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			err = s.withReader(ctx, func(c readConn) error {
				return c.query(ctx, statements[k].text, args, make([]driver.Value, replayColumns), func([]driver.Value) error { n++; return nil })
			})
			if err != nil || n != events {
				b.Fatalf("%s of id %d: %d rows, %v", statements[k].name, e, n, err)
			}
		}
		took[k] += time.Since(start)
	}
	for k := range statements { // prepared outside the timing
		run(k)
	}
	took = [2]time.Duration{}
	i := 0
	for b.Loop() {
		for k := range statements {
			run((k + i) % len(statements))
		}
		i++
	}
	for k, st := range statements {
		b.ReportMetric(float64(took[k].Microseconds())/float64(i*ids), st.name+"-µs/read")
	}
}
