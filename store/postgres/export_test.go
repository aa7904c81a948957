package postgres

// WithBeforeCommitSQL runs stmt inside every write transaction after its
// inserts, before its commit (tests: a slow or killed writer).
func WithBeforeCommitSQL(stmt string) Option { return func(c *config) { c.beforeCommitSQL = stmt } }
