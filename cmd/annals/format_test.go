package main

import (
	"testing"
	"time"

	"github.com/annals-go/annals"
)

func TestFormat(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i))
	}
	when := time.Date(2026, 11, 23, 14, 5, 6, 123456789, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name      string
		got, want string
	}{
		{"num 0", num(0), "0"},
		{"num 999", num(999), "999"},
		{"num 1000", num(1000), "1,000"},
		{"num -1234567", num(-1234567), "-1,234,567"},
		{"num 100000", num(100000), "100,000"},

		{"dur ≥ 1 s to the ms", dur(1234567891 * time.Nanosecond), "1.235s"},
		{"dur ≥ 10 ms to 0.1 ms", dur(12345678 * time.Nanosecond), "12.3ms"},
		{"dur ≥ 1 ms to 10 µs", dur(1234567 * time.Nanosecond), "1.23ms"},
		{"dur < 1 ms to the µs", dur(123456 * time.Nanosecond), "123µs"},
		{"dur 0", dur(0), "0s"},

		{"percentile 0.5", percentile(hundred, 0.5).String(), "50ns"},
		{"percentile 0.9", percentile(hundred, 0.9).String(), "90ns"},
		{"percentile 0.99", percentile(hundred, 0.99).String(), "99ns"},
		{"percentile 1", percentile(hundred, 1).String(), "100ns"},
		{"percentile 0.001", percentile(hundred, 0.001).String(), "1ns"},
		{"percentile of nothing", percentile(nil, 0.5).String(), "0s"},

		{"rate", num(rate(1500, 500*time.Millisecond)), "3,000"},
		{"rate over no time", num(rate(1500, 0)), "0"},

		{"timeText in UTC with µs", timeText(when), "2026-11-23T13:05:06.123456Z"},
		{"timeText zero", timeText(time.Time{}), "-"},
		{"jsonTime", string(mustJSON(t, jsonTime(when))), `"2026-11-23T13:05:06.123456789Z"`},
		{"jsonTime zero", string(mustJSON(t, jsonTime(time.Time{}))), "null"},

		{"bytesText B", bytesText(512), "512 B"},
		{"bytesText KiB", bytesText(1536), "1.5 KiB"},
		{"bytesText MiB", bytesText(3355443), "3.2 MiB"},
		{"bytesText GiB", bytesText(1 << 30), "1.0 GiB"},

		{"yesNo true", yesNo(true), "yes"},
		{"yesNo false", yesNo(false), "no"},
		{"tagsText", tagsText([]string{"a", "b"}), "a,b"},
		{"tagsText none", tagsText(nil), "-"},
		{"textOr", textOr("x", "-"), "x"},
		{"textOr empty", textOr("", "-"), "-"},
		{"rangeList", rangeList([]annals.SliceRange{{Min: 0, Max: 511}, {Min: 512, Max: 1023}}), "0-511, 512-1023"},
		{"rangeList none", rangeList(nil), ""},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
