package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
)

// TestConsoleStates: --registry demo gives the console the accounts'
// behavior, which folds the demo's events (the old deposit manifest
// through its adapter); without it the console has no behavior and says
// how to give one; a bad --registry is a usage error before anything
// opens.
func TestConsoleStates(t *testing.T) {
	t.Parallel()
	reg, err := newVerifyRegistry([]string{"demo"})
	if err != nil {
		t.Fatal(err)
	}
	states, _ := consoleStates(reg)
	fold := states[bank.EntityType]
	if fold == nil {
		t.Fatalf("--registry demo: states %v, want %s", states, bank.EntityType)
	}
	url := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	cli(t, nil, "init", "--store", url).want(t, 0, nil, nil)
	withStore(t, url, func(s *stores.Store) {
		const pid = "Account|x"
		aw := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{
			{PersistenceID: pid, SequenceNr: 1, Payload: []byte(`{"amt":7}`), SerializerID: serialization.JSONID, Manifest: bank.ManifestDepositedV1, WriterID: "w", Timestamp: base},
			{PersistenceID: pid, SequenceNr: 2, Payload: []byte(`{"amount":2}`), SerializerID: serialization.JSONID, Manifest: bank.ManifestWithdrawn, WriterID: "w", Timestamp: base},
		}}
		if res, err := s.Journal.Write(context.Background(), []journal.AtomicWrite{aw}); err != nil || res != nil {
			t.Fatal(res, err)
		}
		st, err := fold(context.Background(), s.Journal, s.Snapshots, pid, 2)
		if err != nil || !strings.Contains(st.JSON, `"balance": 5`) || !strings.Contains(st.JSON, `"ops": 2`) {
			t.Errorf("state at 2: %+v, %v", st, err)
		}
	})
	plain, _ := newVerifyRegistry(nil)
	if states, hint := consoleStates(plain); states != nil || !strings.Contains(hint, "--registry demo") {
		t.Errorf("no registry: %v, %q", states, hint)
	}
	cli(t, nil, "console", "--store", url, "--registry", "x:y").want(t, 2, nil, []string{"--registry"})
}
