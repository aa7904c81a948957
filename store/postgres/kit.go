package postgres

// oneSnapshot is why the rules that need several snapshots of an id are
// not kept on the r2dbc layout.
const oneSnapshot = "the r2dbc layout keeps one snapshot per persistence id (the plugin's primary key is persistence_id): a save replaces the stored one whatever its sequence number, as the plugin's upsert does, so no older snapshot is left to select, keep or delete"

// KitExceptions says how the compliance kit (package storetest) must run
// on a layout: the snapshot and recovery rules (by their names) the layout
// cannot keep by design, with the reasons, for the harnesses' Unsupported;
// and whether an event's timestamp is the time the store wrote it
// (storetest.Capabilities.StoreTimestamps). Annals' layout keeps every
// rule. The package's tests and annals check run the kit with them.
func KitExceptions(l Layout) (snapshots, recovery map[string]string, storeTimestamps bool) {
	if l != LayoutR2DBC {
		return nil, nil, false
	}
	snapshots = map[string]string{
		"LoadUpperSequenceBound":                   oneSnapshot,
		"LoadUpperSequenceAndTimestampBounds":      oneSnapshot,
		"LoadEqualSequenceAndTimestampBounds":      oneSnapshot,
		"LoadLowerBounds":                          oneSnapshot,
		"DeleteOneByMetadata":                      oneSnapshot,
		"DeleteBySequenceWithZeroTimestamp":        oneSnapshot,
		"DeleteMatching":                           oneSnapshot,
		"DeleteMatchingKeepsNonMatchingTimestamps": oneSnapshot,
		"OverwriteSameSequenceNr":                  oneSnapshot,
		"LoadLatest":                               "the plugin's write_timestamp is epoch milliseconds: a snapshot's Timestamp reads back truncated to the millisecond, and the rule wants the microsecond (TestR2DBCReadsPekkoRows loads the latest snapshot of each fixture id)",
	}
	// No write_timestamp column: an event's Timestamp reads as its
	// db_timestamp, as Pekko's PersistentRepr.timestamp does.
	return snapshots, map[string]string{"CriteriaSelectOlderSnapshot": oneSnapshot}, true
}
