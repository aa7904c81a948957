package postgres

// WithBeforeCommitSQL runs stmt inside every write transaction after its
// inserts, before its commit (tests: a slow or killed writer).
func WithBeforeCommitSQL(stmt string) Option { return func(c *config) { c.beforeCommitSQL = stmt } }

// OrderedPlan is the statement sent before every offset-ordered page query.
const OrderedPlan = orderedPlan

// OrderedQueries returns the store's offset-ordered page queries by name.
func OrderedQueries(s *Store) map[string]string {
	return map[string]string{
		"bySlices":  s.sql.bySlices,
		"byTag":     s.sql.byTag,
		"byType":    s.sql.byType,
		"byAnyType": s.sql.byAnyType,
	}
}
