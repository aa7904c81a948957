package cassandra

// RepairReads returns how many events the store's tag repairs have read.
func RepairReads(s *Store) int64 { return s.tags.repairReads.Load() }
