package main

import (
	"encoding/json"
	"math"
	"strings"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/textfmt"
)

// percentile returns the q-quantile (0 < q ≤ 1) of sorted, by nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// dur formats d with three significant digits or so.
func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// num formats n with thousands separators.
func num(n int64) string { return textfmt.Num(n) }

// timeText formats t for tables: UTC with microseconds, "-" when zero.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}

// jsonTime is a time that marshals as null when zero.
type jsonTime time.Time

// MarshalJSON implements json.Marshaler: null when zero, else the time in UTC.
func (t jsonTime) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(time.Time(t).UTC())
}

// bytesText formats a size in bytes: 512 B, 1.5 KiB, 3.2 MiB.
func bytesText(n int64) string { return textfmt.Bytes(n) }

// rate is n per second over d.
func rate(n int64, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n) / d.Seconds())
}

// yesNo is "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// tagsText joins tags with commas; "-" for none.
func tagsText(tags []string) string {
	if len(tags) == 0 {
		return "-"
	}
	return strings.Join(tags, ",")
}

// textOr is s, or dflt when s is empty.
func textOr(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// rangeList formats slice ranges as "0-255, 256-511".
func rangeList(rs []annals.SliceRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
