package main

import (
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/store/sqlite"
)

// TestState: annals state shows an id's durable state (table and --json)
// and says when there is none.
func TestState(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	ds := s.DurableState()
	for rev := int64(1); rev <= 2; rev++ {
		if err := ds.Upsert(t.Context(), durable.Object{PersistenceID: "Profile|p-1", Revision: rev, Payload: []byte(`{"name":"Ada"}`), SerializerID: 31, Manifest: "profile.Profile", Tag: "profiles"}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	url := "sqlite:" + path
	cli(t, nil, "state", "--store", url, "Profile|p-1").want(t, 0, []string{"REVISION", "2", "json", "profile.Profile", "profiles", `{"name":"Ada"}`}, nil)
	var got stateJSON
	decode(t, cli(t, nil, "state", "--store", url, "Profile|p-1", "--json"), &got)
	if !got.Found || got.Revision != 2 || got.Manifest != "profile.Profile" || got.Tag != "profiles" || got.PayloadSize != 14 || got.Timestamp.IsZero() {
		t.Errorf("--json: %+v", got)
	}
	cli(t, nil, "state", "--store", url, "Profile|p-2").want(t, 0, nil, []string{`no durable state of "Profile|p-2"`})
	got = stateJSON{}
	decode(t, cli(t, nil, "state", "--store", url, "Profile|p-2", "--json"), &got)
	if got.Found || got.PersistenceID != "Profile|p-2" {
		t.Errorf("--json of an id with nothing stored: %+v", got)
	}
}
