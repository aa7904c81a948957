package cassandra_test

import (
	"errors"
	"testing"

	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// switchToClaims moves keyspace ks to the claims guard, as
// docs/cassandra.md tells an operator to while no process writes it.
func switchToClaims(t *testing.T, ks string) {
	t.Helper()
	if err := keyspaceSession(t, ks).Query(`UPDATE annals_settings SET value = 'claims' WHERE name = 'write_guard'`).Exec(); err != nil {
		t.Fatal(err)
	}
}

// TestKeyspaceWriteGuard: a keyspace's guard is recorded at its first open
// and adopted by later ones; a store configured with another guard does
// not open; a keyspace that held events before a guard was recorded takes
// the conditional guard, as does one without the claims table.
func TestKeyspaceWriteGuard(t *testing.T) {
	cases := []struct {
		name string
		// before prepares the keyspace through a raw session, after a
		// first open with the conditional guard wrote an event and its
		// record was deleted (an earlier Annals); nil: a new keyspace.
		before       []string
		first        cassandra.WriteGuard // configured at the first open (0: none)
		want         cassandra.WriteGuard
		refuseOpenAs cassandra.WriteGuard
	}{
		{name: "new keyspace", want: cassandra.GuardClaims, refuseOpenAs: cassandra.GuardConditional},
		{name: "new keyspace, conditional configured", first: cassandra.GuardConditional, want: cassandra.GuardConditional, refuseOpenAs: cassandra.GuardClaims},
		{name: "events before the guard was recorded", before: []string{
			`DELETE FROM annals_settings WHERE name = 'write_guard'`,
		}, want: cassandra.GuardConditional, refuseOpenAs: cassandra.GuardClaims},
		{name: "no claims table", before: []string{
			`DELETE FROM annals_settings WHERE name = 'write_guard'`,
			`TRUNCATE messages`,
			`DROP TABLE annals_claims`,
		}, want: cassandra.GuardConditional, refuseOpenAs: cassandra.GuardClaims},
		{name: "no events, no guard recorded", before: []string{
			`DELETE FROM annals_settings WHERE name = 'write_guard'`,
			`TRUNCATE messages`,
		}, want: cassandra.GuardClaims, refuseOpenAs: cassandra.GuardConditional},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, ks := cassandratest.URL(t)
			if tc.before != nil {
				s, err := cassandra.Open(t.Context(), u, cassandra.WithMigrate(true), cassandra.WithWriteGuard(cassandra.GuardConditional))
				if err != nil {
					t.Fatal(err)
				}
				mustWriteOne(t, s.Journal(), payloaded("Guard|1", "w", 1, 1))
				s.Close()
				session := keyspaceSession(t, ks)
				for _, stmt := range tc.before {
					if err := session.Query(stmt).Exec(); err != nil {
						t.Fatalf("%s: %v", stmt, err)
					}
				}
			}
			opts := []cassandra.Option{cassandra.WithMigrate(tc.before == nil)}
			if tc.first != 0 {
				opts = append(opts, cassandra.WithWriteGuard(tc.first))
			}
			s, err := cassandra.Open(t.Context(), u, opts...)
			if err != nil {
				t.Fatalf("first open: %v", err)
			}
			defer s.Close()
			if g := s.WriteGuard(); g != tc.want {
				t.Fatalf("first open: guard %v, want %v", g, tc.want)
			}
			again, err := cassandra.Open(t.Context(), u)
			if err != nil {
				t.Fatalf("second open: %v", err)
			}
			defer again.Close()
			if g := again.WriteGuard(); g != tc.want {
				t.Errorf("second open: guard %v, want the recorded %v", g, tc.want)
			}
			same, err := cassandra.Open(t.Context(), u, cassandra.WithWriteGuard(tc.want))
			if err != nil {
				t.Fatalf("open configured with the recorded guard: %v", err)
			}
			same.Close()
			other, err := cassandra.Open(t.Context(), u, cassandra.WithWriteGuard(tc.refuseOpenAs))
			if err == nil {
				other.Close()
				t.Fatalf("open with the %v guard in a keyspace of the %v guard succeeded", tc.refuseOpenAs, tc.want)
			}
			if !errors.Is(err, cassandra.ErrInvalidConfig) {
				t.Errorf("open with another guard: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestMigratorRecordsWriteGuard: a Migrator opened with a write guard
// (`annals init --store URL?write_guard=conditional`) records it when it
// creates the keyspace, so the first Open adopts it rather than choose
// claims for an empty keyspace; a Migrator with another guard than the
// recorded one fails.
func TestMigratorRecordsWriteGuard(t *testing.T) {
	u, _ := cassandratest.URL(t)
	m, err := cassandra.NewMigrator(t.Context(), u+"?write_guard=conditional")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	s, err := cassandra.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if g := s.WriteGuard(); g != cassandra.GuardConditional {
		t.Errorf("the first open after the migration: guard %v, want conditional (the migrator's)", g)
	}
	other, err := cassandra.NewMigrator(t.Context(), u+"?write_guard=claims")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Migrate(t.Context()); !errors.Is(err, cassandra.ErrInvalidConfig) {
		t.Errorf("migrate with the claims guard in a conditional keyspace: %v, want ErrInvalidConfig", err)
	}
}
