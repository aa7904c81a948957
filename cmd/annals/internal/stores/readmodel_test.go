package stores_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// TestReadModelMigratedWithTheStore: the migrator of a URL with
// readmodel= creates the store, then the read model's database, and the
// store opens in mode Existing with the read model's offsets; a URL whose
// store keeps its own read model is refused, creating nothing.
func TestReadModelMigratedWithTheStore(t *testing.T) {
	ks, _ := cassandratest.URL(t)
	dir := t.TempDir()
	rm := "sqlite:" + filepath.Join(dir, "readmodel.db")
	url := ks + "?readmodel=" + rm
	mux := stores.New()
	ctx := t.Context()
	if _, err := mux.Open(ctx, url, stores.Existing); err == nil {
		t.Fatal("Existing opened a keyspace that was never created")
	}
	m, err := mux.Migrator(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.(interface{ Close() error }).Close()
	if _, err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := mux.Open(ctx, url, stores.Existing)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Kind != "cassandra" || s.Offsets == nil || !s.IDsInStoreOrder {
		t.Errorf("opened %s with offsets %v and IDsInStoreOrder %v, want cassandra with the read model's offsets and its kit facts", s.Kind, s.Offsets, s.IDsInStoreOrder)
	}

	refused := "sqlite:" + filepath.Join(dir, "a.db") + "?readmodel=" + rm
	if _, err := mux.Migrator(ctx, refused); !errors.Is(err, stores.ErrBadURL) {
		t.Errorf("Migrator(%s): %v, want ErrBadURL", refused, err)
	}
	if _, _, err := mux.Scratch(ctx, refused); !errors.Is(err, stores.ErrBadURL) {
		t.Errorf("Scratch(%s): %v, want ErrBadURL", refused, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused URL created its file: %v", err)
	}
}
