package pgtest

import (
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/storetest"
)

// Kit returns s as the compliance kit (package storetest) checks it:
// every value the store offers, its Close, and what its layout declares.
// On the r2dbc layout an event's timestamp is the time the store wrote it
// (StoreTimestamps: no write_timestamp column, so it reads as the
// db_timestamp, as Pekko's PersistentRepr.timestamp does), and the rules
// that need several snapshots of an id, and LoadLatest, are excepted with
// the reasons; Annals' layout keeps every rule. MaxPayloadSize and Open
// are the caller's to set: the store does not say which payload limit it
// was opened with, nor how to open it again.
func Kit(s *postgres.Store) storetest.Store {
	k := storetest.Store{
		Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(), Recovery: s.Journal(),
		Offsets: s.Projections(), Durable: s.DurableState(), Membership: s.Membership(),
		Close: s.Close,
	}
	if s.Layout() == postgres.LayoutR2DBC {
		k.StoreTimestamps = true
		k.Exceptions = map[string]string{"recovery/CriteriaSelectOlderSnapshot": oneSnapshot}
		for _, rule := range []string{
			"LoadUpperSequenceBound",
			"LoadUpperSequenceAndTimestampBounds",
			"LoadEqualSequenceAndTimestampBounds",
			"LoadLowerBounds",
			"DeleteOneByMetadata",
			"DeleteBySequenceWithZeroTimestamp",
			"DeleteMatching",
			"DeleteMatchingKeepsNonMatchingTimestamps",
			"OverwriteSameSequenceNr",
		} {
			k.Exceptions["snapshots/"+rule] = oneSnapshot
		}
		k.Exceptions["snapshots/LoadLatest"] = "the plugin's write_timestamp is epoch milliseconds: a snapshot's Timestamp reads back truncated to the millisecond, and the rule wants the microsecond (TestR2DBCReadsPekkoRows loads the latest snapshot of each fixture id)"
	}
	return k
}

// oneSnapshot is why the rules that need several snapshots of an id are
// not kept on the r2dbc layout.
const oneSnapshot = "the r2dbc layout keeps one snapshot per persistence id (the plugin's primary key is persistence_id): a save replaces the stored one whatever its sequence number, as the plugin's upsert does, so no older snapshot is left to select, keep or delete"
