package eventual

import (
	"errors"
	"testing"
	"time"
)

// The metajournal segments the Scala replicator gave these ids
// (../shared/fixtures/kafka-journal/scala-written).
func TestMetaSegmentMatchesScala(t *testing.T) {
	for _, c := range []struct {
		id   string
		want int64
	}{
		{"json-1", 8420}, {"empty-1", 3439}, {"text-1", 2319}, {"mixed-1", 3231}, {"delete-3", 1121},
		{"Payload-text", 8452}, {"Payload-empty", 8078}, {"Payload-json", 3193},
		{"Payload-binary-many", 9628}, {"Payload-text-many", 1408}, {"Payload-empty-binary-text-json", 1557},
	} {
		if got := MetaSegment(c.id, MetaSegments); got != c.want {
			t.Errorf("MetaSegment(%q) = %d, want %d", c.id, got, c.want)
		}
	}
}

func TestJavaHash(t *testing.T) {
	// Values of java.lang.String.hashCode.
	for _, c := range []struct {
		s    string
		want int32
	}{{"", 0}, {"a", 97}, {"hello", 99162322}, {"polygenelubricants", -2147483648}, {"😀", 1772899}} {
		if got := javaHash(c.s); got != c.want {
			t.Errorf("javaHash(%q) = %d, want %d", c.s, got, c.want)
		}
	}
}

func TestJournalSegment(t *testing.T) {
	for _, c := range []struct {
		seq  int64
		size int
		want int64
	}{{1, 10000, 0}, {10000, 10000, 0}, {10001, 10000, 1}, {3, 3, 0}, {4, 3, 1}, {7, 3, 2}} {
		if got := JournalSegment(c.seq, c.size); got != c.want {
			t.Errorf("JournalSegment(%d, %d) = %d, want %d", c.seq, c.size, got, c.want)
		}
	}
}

func TestExpireAfter(t *testing.T) {
	for _, c := range []struct {
		s string
		d time.Duration
	}{{"1 day", 24 * time.Hour}, {"2 days", 48 * time.Hour}, {"30 minutes", 30 * time.Minute},
		{"1 hour", time.Hour}, {"500 milliseconds", 500 * time.Millisecond}, {"90 seconds", 90 * time.Second}} {
		d, err := ParseExpireAfter(c.s)
		if err != nil || d != c.d {
			t.Errorf("ParseExpireAfter(%q) = %v, %v; want %v", c.s, d, err, c.d)
		}
		if got := FormatExpireAfter(c.d); got != c.s {
			t.Errorf("FormatExpireAfter(%v) = %q, want %q", c.d, got, c.s)
		}
	}
	for _, bad := range []string{"", "1", "day", "-1 day", "1 fortnight", "x days"} {
		if _, err := ParseExpireAfter(bad); !errors.Is(err, ErrExpireAfter) {
			t.Errorf("ParseExpireAfter(%q) = %v, want ErrExpireAfter", bad, err)
		}
	}
	on := expireOn(24*time.Hour, time.Date(2026, 11, 22, 13, 27, 47, 0, time.UTC))
	if want := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC); !on.Equal(want) {
		t.Errorf("expireOn = %v, want %v", on, want)
	}
}

func TestRecordMetadataJSON(t *testing.T) {
	for _, c := range []struct {
		r    Record
		want string
	}{
		{Record{}, `{"header":{},"payload":{}}`},
		{Record{HeaderMetadata: []byte(`{"header":"meta"}`)}, `{"header":{"data":{"header":"meta"}},"payload":{}}`},
	} {
		got, err := c.r.MetadataJSON()
		if err != nil || got != c.want {
			t.Errorf("MetadataJSON = %s, %v; want %s", got, err, c.want)
		}
		h, _, err := ParseMetadataJSON(got)
		if err != nil || string(h) != string(c.r.HeaderMetadata) {
			t.Errorf("ParseMetadataJSON(%s) header = %s, %v", got, h, err)
		}
	}
}
