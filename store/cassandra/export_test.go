package cassandra

import "time"

// RepairReads returns how many events the store's tag repairs have read.
func RepairReads(s *Store) int64 { return s.tags.repairReads.Load() }

// WithScanningFlushInterval sets how often the store moves its ids'
// tag_scanning marks (scanningFlushInterval by default).
func WithScanningFlushInterval(d time.Duration) Option { return func(c *config) { c.scanFlush = d } }
