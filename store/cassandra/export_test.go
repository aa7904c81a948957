package cassandra

import "time"

// RepairReads returns how many events the store's tag repairs have read.
func RepairReads(s *Store) int64 { return s.tags.repairReads.Load() }

// WithScanningFlushInterval sets how often the store moves its ids'
// tag_scanning marks (scanningFlushInterval by default).
func WithScanningFlushInterval(d time.Duration) Option { return func(c *config) { c.scanFlush = d } }

// WithClaimLease sets how far ahead of its last write a claim's timestamp
// bound reaches (DefaultClaimLease by default).
func WithClaimLease(d time.Duration) Option { return func(c *config) { c.claimLease = d } }

// WithAfterClaimedRows runs f after a claimed write's rows are stored and
// before its claim is read again.
func WithAfterClaimedRows(f func(pid string)) Option {
	return func(c *config) { c.afterClaimedRows = f }
}

// DropIDStates drops every id state of s that nobody holds, as the store
// does beyond maxCachedIDs.
func DropIDStates(s *Store) {
	s.tags.mu.Lock()
	defer s.tags.mu.Unlock()
	s.tags.dropStates(len(s.tags.ids))
}
