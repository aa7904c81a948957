package stores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/store/cassandra"
)

// Cassandra is the scheme of "cassandra://" URLs: a keyspace of a
// Cassandra cluster, store/cassandra (the URL's parameters are
// cassandra.Open's), opened by stacks.Open. Its stores keep no projection offsets; their Admin
// reports statistics by reading the whole keyspace.
func Cassandra() Scheme {
	return Scheme{Open: openStack, Migrator: cassandraMigrator, Scratch: cassandraScratch}
}

func cassandraMigrator(ctx context.Context, u string) (admin.Migrator, error) {
	m, err := cassandra.NewMigrator(ctx, u)
	if err != nil {
		return nil, badURLIf(err, cassandra.ErrInvalidConfig)
	}
	return m, nil
}

// cassandraScratch makes the scratch store a new keyspace of the same
// cluster, dropped by the returned function.
func cassandraScratch(ctx context.Context, u string) (string, func() error, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", nil, BadURL(fmt.Errorf("cassandra URL: %w", err))
	}
	// The keyspace is replaced: a malformed one would go unnoticed.
	if ks := strings.Trim(parsed.Path, "/"); ks != "" && !cassandra.ValidKeyspace(ks) {
		return "", nil, BadURL(fmt.Errorf("%w: keyspace %q (want a letter, then up to 47 letters, digits or underscores)", cassandra.ErrInvalidConfig, ks))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	parsed.Path = "/annals_scratch_" + hex.EncodeToString(b[:])
	scratch := parsed.String()
	remove := func() error {
		m, err := cassandra.NewMigrator(context.WithoutCancel(ctx), scratch)
		if err != nil {
			return err
		}
		defer m.Close()
		return m.Drop(context.WithoutCancel(ctx))
	}
	return scratch, remove, nil
}
