package sqlite

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/annals-go/annals/journal"
)

// TestDecodeTags: the split of the plain form and the JSON decoder agree
// on every input, and anything the plain form does not cover (escapes,
// spaces, control characters, invalid UTF-8, other JSON) goes to the
// decoder.
func TestDecodeTags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		plain    bool // split without the decoder
	}{
		{"one", `["a"]`, true},
		{"two", `["tag-0","tag-1"]`, true},
		{"empty array", `[]`, true},
		{"empty tag", `[""]`, true},
		{"empty tags", `["",""]`, true},
		{"comma in a tag", `["a,b","c"]`, true},
		{"unicode", `["é","日本","🙂"]`, true},
		{"escaped quote", `["a\"b"]`, false},
		{"escaped html", `["\u003cb\u003e"]`, false},
		{"escaped backslash", `["a\\b"]`, false},
		{"spaces", `[ "a" , "b" ]`, false},
		{"control character", "[\"a\tb\"]", false},
		{"invalid UTF-8", "[\"a\xffb\"]", false},
		{"number", `[1]`, false},
		{"null", `null`, false},
		{"trailing comma", `["a",]`, false},
		{"unterminated", `["a]`, false},
		{"two without a comma", `["a""b"]`, false},
		{"not an array", `"a"`, false},
		{"nothing", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, plain := plainTags(tc.in)
			if plain != tc.plain {
				t.Errorf("plainTags(%q) ok = %v, want %v", tc.in, plain, tc.plain)
			}
			got, gotErr := decodeTags(tc.in)
			var want []string
			wantErr := json.Unmarshal([]byte(tc.in), &want)
			if (gotErr != nil) != (wantErr != nil) || (wantErr == nil && !reflect.DeepEqual(got, want)) {
				t.Errorf("decodeTags(%q) = %q, %v; json.Unmarshal: %q, %v", tc.in, got, gotErr, want, wantErr)
			}
		})
	}
}

// TestDriverBlobsAreNotReused: the driver returns each row's blobs in
// slices of their own, which readDriver's callers keep without copying;
// a driver version that reused a buffer would fail here.
func TestDriverBlobsAreNotReused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "blobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := journal.AtomicWrite{PersistenceID: "B|1"}
	for seq := range int64(3) {
		w.Events = append(w.Events, journal.Repr{PersistenceID: "B|1", SequenceNr: seq + 1, Payload: []byte{byte('a' + seq), 1, 2, 3}, Metadata: []byte{byte('x' + seq)}})
	}
	if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	args, err := namedArgs("B|1", 1, 3, 10)
	if err != nil {
		t.Fatal(err)
	}
	var payloads, metadata [][]byte
	err = s.readDriver(context.Background(), replaySQL, args, make([]driver.Value, replayColumns), func(v []driver.Value) error {
		payloads = append(payloads, v[3].([]byte))
		metadata = append(metadata, v[8].([]byte))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range w.Events {
		if i >= len(payloads) || string(payloads[i]) != string(e.Payload) || string(metadata[i]) != string(e.Metadata) {
			t.Fatalf("kept blobs %q and %q, want the events' %d payloads and metadata", payloads, metadata, len(w.Events))
		}
	}
}

// TestRowValuesRefuseWrongKinds: a value of a kind its column cannot hold
// is an error, not a zero.
func TestRowValuesRefuseWrongKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		read func(r *rowValues)
	}{
		{"text as integer", func(r *rowValues) { r.int(0) }},
		{"integer as text", func(r *rowValues) { r.text(1) }},
		{"integer as blob", func(r *rowValues) { r.blob(1) }},
		{"NULL as integer", func(r *rowValues) { r.int(2) }},
		{"beyond 32 bits", func(r *rowValues) { r.int32(3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rowValues{v: []driver.Value{"x", int64(1), nil, int64(1) << 40}}
			tc.read(&r)
			if r.err == nil {
				t.Error("no error")
			}
		})
	}
	r := rowValues{v: []driver.Value{int64(7), "t", []byte("b"), nil, "s", []byte("u")}}
	if n, s, b, m, bs, st := r.int(0), r.text(1), r.blob(2), r.blob(3), r.blob(4), r.text(5); r.err != nil || n != 7 || s != "t" || string(b) != "b" || m != nil || string(bs) != "s" || st != "u" {
		t.Errorf("read %d %q %q %q %q %q, %v", n, s, b, m, bs, st, r.err)
	}
}
