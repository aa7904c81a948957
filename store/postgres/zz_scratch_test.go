//go:build scratch

package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func BenchmarkScratchExplain(b *testing.B) {
	s := open(b)
	loadCatchUp(b, s)
	tbl := pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()
	q := `EXPLAIN (ANALYZE, BUFFERS) SELECT ` + benchColumns + ` FROM ` + tbl + ` e
	WHERE e.entity_type = $1 AND e.slice BETWEEN $2 AND $3
	AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($4, $5, $6) AND e.db_timestamp <= $7
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $8`
	mid := time.Now().Add(-time.Hour).Truncate(time.Second).Add(500 * time.Millisecond)
	for _, args := range [][]any{
		{"Bench", 0, 1023, time.Time{}, -1, "", time.Now(), 1000},
		{"Bench", 0, 1023, mid, -1, "", time.Now(), 1000},
		{"Bench", 0, 255, mid, -1, "", time.Now(), 1000},
	} {
		for _, mode := range []string{"custom", "generic"} {
			conn, _ := s.Pool().Acquire(b.Context())
			conn.Exec(b.Context(), "SET plan_cache_mode = force_"+mode+"_plan")
			rows, err := conn.Query(b.Context(), q, args...)
			if err != nil {
				b.Fatal(err)
			}
			b.Log(mode, args[2], args[3])
			for rows.Next() {
				var l string
				rows.Scan(&l)
				b.Log(l)
			}
			rows.Close()
			conn.Exec(b.Context(), "RESET plan_cache_mode")
			conn.Release()
		}
	}
}
