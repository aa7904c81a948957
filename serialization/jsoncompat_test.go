package serialization_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/serialization"
)

// compatInner is embedded in compatEvent, and decoded by a method of its
// own in compatCustom.
type compatInner struct {
	Region string `json:"region"`
}

// compatCustom decodes itself: "a-b" becomes A "a", B "b".
type compatCustom struct{ A, B string }

func (c *compatCustom) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	c.A, c.B, _ = strings.Cut(s, "-")
	return nil
}

// compatEvent has a field of each kind whose decoding encoding/json
// defines: what the registry's decoder must reproduce.
type compatEvent struct {
	compatInner
	ID       string            `json:"id"`
	Count    int64             `json:"count,string"`
	Ratio    float64           `json:"ratio"`
	At       time.Time         `json:"at"`
	Blob     []byte            `json:"blob"`
	Labels   map[string]string `json:"labels"`
	Any      any               `json:"any"`
	Raw      json.RawMessage   `json:"raw"`
	Ptr      *int              `json:"ptr"`
	List     []int             `json:"list"`
	Custom   compatCustom      `json:"custom"`
	Ignored  string            `json:"-"`
	Untagged string
}

// TestJSONDecodesAsEncodingJSON: the JSON serializer decodes payloads into
// the values encoding/json gives (its decoder is another implementation of
// the same semantics): field names matched without regard to case, unknown
// and duplicate fields, null, strings holding numbers, embedded structs,
// base64 bytes, numbers in an interface as float64, a type's own
// UnmarshalJSON; and it refuses what encoding/json refuses, with
// encoding/json's error types.
func TestJSONDecodesAsEncodingJSON(t *testing.T) {
	r := serialization.NewRegistry()
	if err := serialization.RegisterJSON[compatEvent](r, "compat"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, payload string
	}{
		{"every field", `{"id":"x","count":"12","ratio":0.5,"at":"2026-11-26T07:00:00.123456789+01:00","blob":"aGVsbG8=","labels":{"a":"b"},
			"any":{"n":1,"l":[true,null,"s"]},"raw":{"k": [1, 2]},"ptr":7,"list":[1,2,3],"custom":"left-right","region":"eu","Untagged":"u"}`},
		{"names in another case", `{"ID":"x","Region":"eu","untagged":"u","COUNT":"3"}`},
		{"unknown fields", `{"id":"x","extra":{"deep":[1,2]},"more":null}`},
		{"a duplicate field, the last wins", `{"id":"first","id":"second"}`},
		{"nulls", `{"id":null,"labels":null,"ptr":null,"list":null,"any":null,"blob":null}`},
		{"an ignored field", `{"Ignored":"no","-":"no"}`},
		{"empty", `{}`},
		{"spaces around", " \n\t{ \"id\" : \"x\" } \n"},
		{"a large integer in an interface", `{"any":12345678901234567890}`},
		{"unicode escapes", `{"id":"\u00e9\ud83d\ude00"}`},
		{"a syntax error", `{"id":`},
		{"the wrong type", `{"ratio":"high"}`},
		{"trailing data", `{"id":"x"} {}`},
		{"not an object", `[1,2]`},
		{"a number string that is not a number", `{"count":"twelve"}`},
		{"invalid base64", `{"blob":"***"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var want compatEvent
			wantErr := json.Unmarshal([]byte(c.payload), &want)
			got, err := r.Deserialize([]byte(c.payload), serialization.JSONID, "compat")
			if wantErr != nil {
				if err == nil {
					t.Fatalf("decoded %+v; encoding/json refuses it: %v", got, wantErr)
				}
				if wt, et := reflect.TypeOf(wantErr), errorOfType(err, reflect.TypeOf(wantErr)); et == nil {
					t.Errorf("error %v wraps no %v (encoding/json's: %v)", err, wt, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused (%v); encoding/json decodes %+v", err, want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded\n%#v\nencoding/json decodes\n%#v", got, want)
			}
		})
	}
}

// errorOfType returns the error in err's chain of type typ, nil if none.
func errorOfType(err error, typ reflect.Type) error {
	for err != nil {
		if reflect.TypeOf(err) == typ {
			return err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if found := errorOfType(e, typ); found != nil {
					return found
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}
