package cassandra

import (
	"context"
	"fmt"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// BucketSize is the span of time one tag_views partition holds for a tag
// (Pekko's events-by-tag.bucket-size). Choose by the busiest tag: Day for
// thousands of events a day, Hour for hundreds of thousands, Minute for
// millions. A keyspace keeps the size it was first opened with.
type BucketSize int

// Bucket sizes, as Pekko names them.
const (
	Day BucketSize = iota + 1
	Hour
	Minute
)

// Duration returns the span of the bucket, 0 for an unknown size.
func (b BucketSize) Duration() time.Duration {
	switch b {
	case Day:
		return 24 * time.Hour
	case Hour:
		return time.Hour
	case Minute:
		return time.Minute
	}
	return 0
}

// String returns Pekko's name of the size: Day, Hour or Minute.
func (b BucketSize) String() string {
	switch b {
	case Day:
		return "Day"
	case Hour:
		return "Hour"
	case Minute:
		return "Minute"
	}
	return fmt.Sprintf("BucketSize(%d)", int(b))
}

// ParseBucketSize reads Day, Hour or Minute (any case).
func ParseBucketSize(s string) (BucketSize, error) {
	for _, b := range []BucketSize{Day, Hour, Minute} {
		if strings.EqualFold(s, b.String()) {
			return b, nil
		}
	}
	return 0, fmt.Errorf("bucket size %q (want Day, Hour or Minute)", s)
}

// Key returns the timebucket of t: the start of its bucket in Unix
// milliseconds, as Pekko's TimeBucket computes it.
func (b BucketSize) Key(t time.Time) int64 {
	ms, span := t.UnixMilli(), b.Duration().Milliseconds()
	k := ms - ms%span
	if ms < 0 && ms%span != 0 {
		k -= span
	}
	return k
}

// settingBucketSize is the annals_settings row that fixes the keyspace's
// bucket size at its first use.
const settingBucketSize = "tag_bucket_size"

// fixBucketSize records the configured bucket size in a keyspace that has
// none (a lightweight transaction, so that two first opens agree), or
// adopts the recorded one; a configured size that differs from the
// recorded one is an error.
func (s *Store) fixBucketSize(ctx context.Context) error {
	want := s.cfg.bucketSize
	if want == 0 {
		want = DefaultBucketSize
	}
	v, err := s.recordSetting(ctx, settingBucketSize, want.String())
	if err != nil {
		return s.errs.Map(ctx, "record the tag bucket size", err, errClosed)
	}
	have, err := ParseBucketSize(v)
	if err != nil {
		return fmt.Errorf("%w: keyspace %s records an unknown %s: %w", ErrInvalidConfig, s.cfg.keyspace, settingBucketSize, err)
	}
	if s.cfg.bucketSize != 0 && have != s.cfg.bucketSize {
		return fmt.Errorf("%w: keyspace %s keeps events by tag in %s buckets; it cannot be opened with %s buckets (rows already written would not be found)",
			ErrInvalidConfig, s.cfg.keyspace, have, s.cfg.bucketSize)
	}
	s.bucket = have
	return nil
}

// recordSetting records value as the keyspace's setting name unless it has
// one (a lightweight transaction, so that two first opens agree), and
// returns the value the keyspace keeps: value, or the one recorded first.
func (s *Store) recordSetting(ctx context.Context, name, value string) (string, error) {
	prev := map[string]any{}
	applied, err := s.session.Query(s.sql.insertSetting, name, value).
		WithContext(ctx).SerialConsistency(s.cfg.serialCL).MapScanCAS(prev)
	if err != nil || applied {
		return value, err
	}
	v, _ := prev["value"].(string)
	return v, nil
}

// BucketSize returns the keyspace's tag bucket size.
func (s *Store) BucketSize() BucketSize { return s.bucket }

// compareTimeUUID orders version-1 UUIDs as Cassandra's timeuuid type
// does: by time, then by the remaining eight bytes compared as signed
// bytes.
func compareTimeUUID(a, b gocql.UUID) int {
	if ta, tb := a.Timestamp(), b.Timestamp(); ta != tb {
		if ta < tb {
			return -1
		}
		return 1
	}
	for i := 8; i < 16; i++ {
		if x, y := int8(a[i]), int8(b[i]); x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
