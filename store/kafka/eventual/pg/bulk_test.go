package pg

import (
	"encoding/json"
	"maps"
	"testing"
)

// TestHeadersJSON: the headers' JSON, written without encoding/json,
// decodes to what encoding/json decodes from its own, whatever the bytes.
func TestHeadersJSON(t *testing.T) {
	for _, h := range []map[string]string{
		{"annals.timestamps": "[1700000000000000]"},
		{"b": "2", "a": "1", "": ""},
		{"quote\"back\\slash": "tab\tnew\nline\x00\x1f"},
		{"utf8": "é漢字🙂", "invalid": "a\xffb\xc3"},
		{"html": "<&>\u2028\u2029"},
	} {
		var got, want map[string]string
		if err := json.Unmarshal([]byte(headersJSON(h)), &got); err != nil {
			t.Fatalf("%q: %v", headersJSON(h), err)
		}
		enc, _ := json.Marshal(h)
		if err := json.Unmarshal(enc, &want); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("headersJSON(%q) decodes to %q, encoding/json's to %q", h, got, want)
		}
	}
}

// TestArrayLiteral: tags reach a text[] through its literal, quotes and
// backslashes escaped.
func TestArrayLiteral(t *testing.T) {
	for _, c := range []struct {
		tags []string
		want string
	}{
		{[]string{"a"}, `{"a"}`},
		{[]string{"a,b", "c d", ""}, `{"a,b","c d",""}`},
		{[]string{`q"uote`, `back\slash`, "NULL"}, `{"q\"uote","back\\slash","NULL"}`},
	} {
		if got := arrayLiteral(c.tags); got != c.want {
			t.Errorf("arrayLiteral(%q) = %s, want %s", c.tags, got, c.want)
		}
	}
}
