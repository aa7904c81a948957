package engine

// RecoveriesWaiting returns how many recoveries wait in f's queue for a
// grouped read.
func RecoveriesWaiting(f *Front) int {
	f.groups.mu.Lock()
	defer f.groups.mu.Unlock()
	return len(f.groups.waiting)
}
