package console

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
)

// errNoSchemaVersion: the console has no way to ask the store for its
// schema version.
var errNoSchemaVersion = errors.New("this store does not report a schema version")

// schemaEvery is how long a schema version read is kept.
const schemaEvery = 30 * time.Second

// schemaVersions reads the schema version of a store by its URL, when
// the caller gave no Options.SchemaVersion: through the migrator of the
// URL's scheme (stores.New().Migrator, what annals migrate --dry-run and
// annals init use), opened for one read and closed after it. A version
// read is kept for schemaEvery; an error is not kept.
type schemaVersions struct {
	url     string
	migrate func(ctx context.Context, url string) (schemaReader, error)

	mu              sync.Mutex
	at              time.Time
	current, latest int
}

// schemaReader is what the console needs of an admin.Migrator.
type schemaReader interface {
	SchemaVersion(ctx context.Context) (current, latest int, err error)
}

func newSchemaVersions(url string) *schemaVersions {
	mux := stores.New()
	return &schemaVersions{url: url, migrate: func(ctx context.Context, url string) (schemaReader, error) {
		return mux.Migrator(ctx, url)
	}}
}

func (v *schemaVersions) read(ctx context.Context) (current, latest int, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.at.IsZero() && time.Since(v.at) < schemaEvery {
		return v.current, v.latest, nil
	}
	m, err := v.migrate(ctx, v.url)
	if err != nil {
		// The URL names no scheme the console knows, or its migrator
		// cannot be made: the version is unknown, not failing.
		return 0, 0, errNoSchemaVersion
	}
	if c, ok := m.(io.Closer); ok {
		defer c.Close()
	}
	current, latest, err = m.SchemaVersion(ctx)
	if err != nil {
		return 0, 0, err
	}
	v.at, v.current, v.latest = time.Now(), current, latest
	return current, latest, nil
}

// sameKind reports whether url is of a scheme that opens stores of kind
// (stores.Store.Kind): only then is its migrator the open store's.
func sameKind(url, kind string) bool {
	scheme, _, ok := strings.Cut(url, ":")
	if !ok || kind == "" {
		return false
	}
	scheme = strings.ToLower(scheme)
	if scheme == "postgresql" {
		scheme = "postgres"
	}
	return scheme == kind
}
