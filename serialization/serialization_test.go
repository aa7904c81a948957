package serialization_test

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/annals-go/annals/internal/fixtures"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

// ItemAdded is registered with an explicit manifest.
type ItemAdded struct {
	SKU      string    `json:"sku"`
	Quantity int       `json:"quantity"`
	Price    float64   `json:"price"`
	Tags     []string  `json:"tags,omitempty"`
	At       time.Time `json:"at"`
}

// CartClosed is registered with the default manifest.
type CartClosed struct {
	Reason string
	Items  map[string]int
}

type unregistered struct{ X int }

const cartClosedManifest = "github.com/annals-go/annals/serialization_test.CartClosed"

func newRegistry(t *testing.T) *serialization.Registry {
	t.Helper()
	r := serialization.NewRegistry()
	if err := serialization.RegisterJSON[ItemAdded](r, "shop.ItemAdded.v1"); err != nil {
		t.Fatalf("RegisterJSON[ItemAdded]: %v", err)
	}
	if err := serialization.RegisterJSON[CartClosed](r, ""); err != nil {
		t.Fatalf("RegisterJSON[CartClosed]: %v", err)
	}
	return r
}

func TestRoundTrip(t *testing.T) {
	r := newRegistry(t)
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	tests := []struct {
		name         string
		value        any
		wantID       int32
		wantManifest string
	}{
		{"bytes", []byte{0, 1, 2, 255}, serialization.BytesID, ""},
		{"empty bytes", []byte{}, serialization.BytesID, ""},
		{"JSON explicit manifest", ItemAdded{SKU: "A-1", Quantity: 3, Price: 9.5, Tags: []string{"x", "y"}, At: at}, serialization.JSONID, "shop.ItemAdded.v1"},
		{"JSON default manifest", CartClosed{Reason: "paid", Items: map[string]int{"A-1": 3}}, serialization.JSONID, cartClosedManifest},
		{"JSON zero value", CartClosed{}, serialization.JSONID, cartClosedManifest},
		{"protobuf StringValue", wrapperspb.String("hello, ünïcode"), serialization.ProtobufID, "google.protobuf.StringValue"},
		{"protobuf Timestamp", timestamppb.New(at), serialization.ProtobufID, "google.protobuf.Timestamp"},
		{"protobuf empty message", &wrapperspb.StringValue{}, serialization.ProtobufID, "google.protobuf.StringValue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, id, manifest, err := r.Serialize(tt.value)
			if err != nil {
				t.Fatalf("Serialize: %v", err)
			}
			if id != tt.wantID || manifest != tt.wantManifest {
				t.Fatalf("Serialize = id %d manifest %q, want id %d manifest %q", id, manifest, tt.wantID, tt.wantManifest)
			}
			got, err := r.Deserialize(payload, id, manifest)
			if err != nil {
				t.Fatalf("Deserialize: %v", err)
			}
			assertEqual(t, got, tt.value)

			// The same payload read back as a stored event and snapshot.
			got, err = r.DeserializeRepr(journal.Repr{PersistenceID: "Cart|1", SequenceNr: 7, Payload: payload, SerializerID: id, Manifest: manifest})
			if err != nil {
				t.Fatalf("DeserializeRepr: %v", err)
			}
			assertEqual(t, got, tt.value)
			got, err = r.DeserializeSnapshot(snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Cart|1", SequenceNr: 7}, Payload: payload, SerializerID: id, Manifest: manifest})
			if err != nil {
				t.Fatalf("DeserializeSnapshot: %v", err)
			}
			assertEqual(t, got, tt.value)
		})
	}
}

// assertEqual compares a deserialized value with the original: protobuf
// messages with proto.Equal, everything else by type and reflect.DeepEqual.
func assertEqual(t *testing.T, got, want any) {
	t.Helper()
	if reflect.TypeOf(got) != reflect.TypeOf(want) {
		t.Fatalf("got type %T, want %T", got, want)
	}
	if wm, ok := want.(proto.Message); ok {
		if !proto.Equal(got.(proto.Message), wm) {
			t.Fatalf("got %v, want %v", got, want)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}

func TestBytesAreCopied(t *testing.T) {
	r := serialization.NewRegistry()
	in := []byte("abc")
	payload, id, manifest, err := r.Serialize(in)
	if err != nil {
		t.Fatal(err)
	}
	in[0] = 'X'
	if string(payload) != "abc" {
		t.Fatalf("payload aliases the value: %q", payload)
	}
	v, err := r.Deserialize(payload, id, manifest)
	if err != nil {
		t.Fatal(err)
	}
	payload[1] = 'Y'
	if got := v.([]byte); string(got) != "abc" {
		t.Fatalf("deserialized value aliases the payload: %q", got)
	}
	if v, err := r.Deserialize(nil, id, ""); err != nil || v.([]byte) == nil {
		t.Fatalf("Deserialize(nil) = %#v, %v; want non-nil empty slice", v, err)
	}
}

func TestJSONPayloadIsPlainJSON(t *testing.T) {
	r := newRegistry(t)
	payload, _, _, err := r.Serialize(ItemAdded{SKU: "A-1", Quantity: 2})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatalf("payload is not JSON: %v (%s)", err, payload)
	}
	if m["sku"] != "A-1" || m["quantity"] != 2.0 {
		t.Fatalf("payload = %s", payload)
	}
	// Unknown fields (written by a newer version of the type) are ignored.
	v, err := r.Deserialize([]byte(`{"sku":"B","quantity":1,"added_later":true}`), serialization.JSONID, "shop.ItemAdded.v1")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.(ItemAdded); got.SKU != "B" || got.Quantity != 1 {
		t.Fatalf("got %#v", got)
	}
}

func TestProtobufDeterministic(t *testing.T) {
	r := serialization.NewRegistry()
	m := timestamppb.New(time.Unix(1700000000, 42))
	p1, _, _, err := r.Serialize(m)
	if err != nil {
		t.Fatal(err)
	}
	p2, _, _, err := r.Serialize(proto.Clone(m))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p1, p2) {
		t.Fatalf("equal messages gave different bytes: %x vs %x", p1, p2)
	}
}

func TestDecodeErrors(t *testing.T) {
	r := newRegistry(t)
	good, _, _, err := r.Serialize(wrapperspb.String("x"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		payload  []byte
		id       int32
		manifest string
		wantIs   error  // sentinel the error wraps, or nil
		wantAs   any    // pointer to a decoder error type the error wraps, or nil
		wantText string // extra text in the message
	}{
		{"unknown serializer id", []byte("x"), 999, "whatever", serialization.ErrUnknownSerializer, nil, "unknown serializer"},
		{"unknown JSON manifest", []byte(`{}`), serialization.JSONID, "shop.Nope", serialization.ErrUnknownManifest, nil, "shop.Nope"},
		{"unknown protobuf manifest", good, serialization.ProtobufID, "no.such.Message", serialization.ErrUnknownManifest, nil, "no.such.Message"},
		{"invalid protobuf manifest", good, serialization.ProtobufID, "not a name!", serialization.ErrUnknownManifest, nil, "not a name!"},
		{"empty protobuf manifest", good, serialization.ProtobufID, "", serialization.ErrUnknownManifest, nil, ""},
		{"bytes with a manifest", []byte("x"), serialization.BytesID, "some.Type", serialization.ErrUnknownManifest, nil, "some.Type"},
		{"corrupt JSON", []byte(`{"sku": 12`), serialization.JSONID, "shop.ItemAdded.v1", nil, new(*json.SyntaxError), "unexpected end of JSON"},
		{"JSON of the wrong shape", []byte(`{"sku": 12}`), serialization.JSONID, "shop.ItemAdded.v1", nil, new(*json.UnmarshalTypeError), "sku"},
		{"corrupt protobuf", []byte{0x0a, 0xff, 0xff, 0xff}, serialization.ProtobufID, "google.protobuf.StringValue", nil, nil, "proto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, src := range []struct {
				name string
				pid  string
				seq  int64
				do   func() (any, error)
			}{
				{"Deserialize", "", 0, func() (any, error) { return r.Deserialize(tt.payload, tt.id, tt.manifest) }},
				{"DeserializeRepr", "Cart|42", 17, func() (any, error) {
					return r.DeserializeRepr(journal.Repr{PersistenceID: "Cart|42", SequenceNr: 17, Payload: tt.payload, SerializerID: tt.id, Manifest: tt.manifest})
				}},
				{"DeserializeSnapshot", "Cart|43", 18, func() (any, error) {
					return r.DeserializeSnapshot(snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Cart|43", SequenceNr: 18}, Payload: tt.payload, SerializerID: tt.id, Manifest: tt.manifest})
				}},
			} {
				t.Run(src.name, func(t *testing.T) {
					v, err := src.do()
					if err == nil {
						t.Fatalf("got value %#v, want error", v)
					}
					if v != nil {
						t.Errorf("got value %#v with error", v)
					}
					var de *serialization.DecodeError
					if !errors.As(err, &de) {
						t.Fatalf("error %T is not a *DecodeError: %v", err, err)
					}
					if de.SerializerID != tt.id || de.Manifest != tt.manifest || de.PersistenceID != src.pid || de.SequenceNr != src.seq {
						t.Errorf("DecodeError fields = %+v", de)
					}
					msg := err.Error()
					wants := []string{strconv.Itoa(int(tt.id)), strconv.Quote(tt.manifest), tt.wantText}
					if src.pid != "" {
						wants = append(wants, src.pid, strconv.FormatInt(src.seq, 10))
					}
					for _, w := range wants {
						if !strings.Contains(msg, w) {
							t.Errorf("message %q does not contain %q", msg, w)
						}
					}
					if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
						t.Errorf("error does not wrap %v: %v", tt.wantIs, err)
					}
					if tt.wantAs != nil && !errors.As(err, tt.wantAs) {
						t.Errorf("error does not wrap %T: %v", tt.wantAs, err)
					}
					if tt.wantIs == nil {
						for _, s := range []error{serialization.ErrUnknownSerializer, serialization.ErrUnknownManifest} {
							if errors.Is(err, s) {
								t.Errorf("corrupt payload error wraps %v: %v", s, err)
							}
						}
					}
				})
			}
		})
	}
}

func TestDecodeErrorUnwrap(t *testing.T) {
	cause := errors.New("boom")
	err := error(&serialization.DecodeError{PersistenceID: "A|1", SequenceNr: 3, SerializerID: 100, Manifest: "m", Err: cause})
	if !errors.Is(err, cause) {
		t.Fatal("DecodeError does not unwrap to its cause")
	}
	want := `serialization: cannot decode payload of persistence id "A|1" sequence nr 3 (serializer id 100, manifest "m"): boom`
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestNotSerializable(t *testing.T) {
	r := newRegistry(t)
	tests := []struct {
		name     string
		value    any
		wantText string
	}{
		{"unregistered struct", unregistered{X: 1}, "github.com/annals-go/annals/serialization_test.unregistered"},
		{"pointer to registered type", &ItemAdded{}, "*serialization_test.ItemAdded"},
		{"string", "hello", "string"},
		{"named byte slice", json.RawMessage(`{}`), "encoding/json.RawMessage"},
		{"nil", nil, "nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, id, manifest, err := r.Serialize(tt.value)
			if !errors.Is(err, serialization.ErrNotSerializable) {
				t.Fatalf("Serialize = %x, %d, %q, %v; want ErrNotSerializable", payload, id, manifest, err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("message %q does not name %q", err.Error(), tt.wantText)
			}
		})
	}

	// A registry without the built-ins serializes nothing by the default rules.
	var empty serialization.Registry
	for _, v := range []any{[]byte("x"), wrapperspb.String("x")} {
		if _, _, _, err := empty.Serialize(v); !errors.Is(err, serialization.ErrNotSerializable) {
			t.Errorf("zero Registry Serialize(%T) error = %v, want ErrNotSerializable", v, err)
		}
	}
	if err := serialization.RegisterJSON[ItemAdded](&empty, ""); !errors.Is(err, serialization.ErrUnknownSerializer) {
		t.Errorf("RegisterJSON on zero Registry error = %v, want ErrUnknownSerializer", err)
	}
}

func TestRegistrationErrors(t *testing.T) {
	tests := []struct {
		name string
		do   func(r *serialization.Registry) error
		want error
	}{
		{"built-in bytes id", func(r *serialization.Registry) error { return r.Register(serialization.Bytes()) }, serialization.ErrDuplicate},
		{"built-in JSON id", func(r *serialization.Registry) error { return r.Register(serialization.JSON()) }, serialization.ErrDuplicate},
		{"built-in protobuf id", func(r *serialization.Registry) error { return r.Register(serialization.Protobuf(nil)) }, serialization.ErrDuplicate},
		{"custom id twice", func(r *serialization.Registry) error {
			if err := r.Register(celsiusSerializer{}); err != nil {
				return fmt.Errorf("first Register: %v", err) // not wrapping: must not match
			}
			return r.Register(celsiusSerializer{})
		}, serialization.ErrDuplicate},
		{"nil serializer", func(r *serialization.Registry) error { return r.Register(nil) }, serialization.ErrInvalidArgument},
		{"JSON manifest twice", func(r *serialization.Registry) error {
			return serialization.RegisterJSON[unregistered](r, "shop.ItemAdded.v1")
		}, serialization.ErrDuplicate},
		{"JSON type twice", func(r *serialization.Registry) error {
			return serialization.RegisterJSON[ItemAdded](r, "another.manifest")
		}, serialization.ErrDuplicate},
		{"JSON default manifest twice", func(r *serialization.Registry) error {
			return serialization.RegisterJSON[CartClosed](r, "")
		}, serialization.ErrDuplicate},
		{"JSON interface type", func(r *serialization.Registry) error { return serialization.RegisterJSON[any](r, "any") }, serialization.ErrInvalidArgument},
		{"JSON unnamed type without manifest", func(r *serialization.Registry) error { return serialization.RegisterJSON[[]string](r, "") }, serialization.ErrInvalidArgument},
		{"Bind unknown id", func(r *serialization.Registry) error { return r.Bind(reflect.TypeFor[Celsius](), 12345) }, serialization.ErrUnknownSerializer},
		{"Bind twice", func(r *serialization.Registry) error {
			if err := r.Bind(reflect.TypeFor[unregistered](), serialization.JSONID); err != nil {
				return fmt.Errorf("first Bind: %v", err)
			}
			return r.Bind(reflect.TypeFor[unregistered](), serialization.BytesID)
		}, serialization.ErrDuplicate},
		{"Bind nil type", func(r *serialization.Registry) error { return r.Bind(nil, serialization.JSONID) }, serialization.ErrInvalidArgument},
		{"Bind interface type", func(r *serialization.Registry) error { return r.Bind(reflect.TypeFor[error](), serialization.JSONID) }, serialization.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRegistry(t)
			if err := tt.do(r); !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want one wrapping %v", err, tt.want)
			}
			// The failed registration changed nothing.
			for _, v := range []any{[]byte("x"), ItemAdded{SKU: "s"}, CartClosed{Reason: "r"}} {
				p, id, m, err := r.Serialize(v)
				if err != nil {
					t.Fatalf("Serialize(%T) after failed registration: %v", v, err)
				}
				got, err := r.Deserialize(p, id, m)
				if err != nil {
					t.Fatalf("Deserialize(%T) after failed registration: %v", v, err)
				}
				assertEqual(t, got, v)
			}
		})
	}
}

// Celsius is serialized by a custom serializer as decimal text.
type Celsius float64

const celsiusID int32 = 100

type celsiusSerializer struct{}

func (celsiusSerializer) ID() int32 { return celsiusID }

func (celsiusSerializer) Manifest(v any) (string, error) {
	switch v.(type) {
	case Celsius:
		return "C", nil
	case ItemAdded:
		return "item", nil
	}
	return "", fmt.Errorf("%w: %T", serialization.ErrNotSerializable, v)
}

func (celsiusSerializer) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case Celsius:
		return strconv.AppendFloat(nil, float64(v), 'g', -1, 64), nil
	case ItemAdded:
		return []byte(v.SKU), nil
	}
	return nil, fmt.Errorf("%w: %T", serialization.ErrNotSerializable, v)
}

func (celsiusSerializer) Unmarshal(data []byte, manifest string) (any, error) {
	switch manifest {
	case "C":
		f, err := strconv.ParseFloat(string(data), 64)
		if err != nil {
			return nil, err
		}
		return Celsius(f), nil
	case "item":
		return ItemAdded{SKU: string(data)}, nil
	}
	return nil, fmt.Errorf("%w: %q", serialization.ErrUnknownManifest, manifest)
}

func TestCustomSerializer(t *testing.T) {
	r := newRegistry(t)
	if err := r.Register(celsiusSerializer{}); err != nil {
		t.Fatal(err)
	}
	if s, ok := r.Serializer(celsiusID); !ok || s.ID() != celsiusID {
		t.Fatalf("Serializer(%d) = %v, %v", celsiusID, s, ok)
	}
	// Before Bind the type has no serializer.
	if _, _, _, err := r.Serialize(Celsius(21.5)); !errors.Is(err, serialization.ErrNotSerializable) {
		t.Fatalf("Serialize before Bind: %v, want ErrNotSerializable", err)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Celsius](), reflect.TypeFor[ItemAdded]()} {
		if err := r.Bind(typ, celsiusID); err != nil {
			t.Fatalf("Bind(%v): %v", typ, err)
		}
	}
	tests := []struct {
		name         string
		value        any
		wantPayload  string
		wantManifest string
	}{
		{"bound type", Celsius(21.5), "21.5", "C"},
		// The binding wins over the type's RegisterJSON registration.
		{"binding overrides JSON", ItemAdded{SKU: "A-1"}, "A-1", "item"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, id, manifest, err := r.Serialize(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if id != celsiusID || manifest != tt.wantManifest || string(payload) != tt.wantPayload {
				t.Fatalf("Serialize = %q, %d, %q", payload, id, manifest)
			}
			got, err := r.Deserialize(payload, id, manifest)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, got, tt.value)
		})
	}
	// A decoding error of a custom serializer becomes a DecodeError too.
	_, err := r.DeserializeRepr(journal.Repr{PersistenceID: "T|1", SequenceNr: 2, Payload: []byte("warm"), SerializerID: celsiusID, Manifest: "C"})
	var de *serialization.DecodeError
	var ne *strconv.NumError
	if !errors.As(err, &de) || !errors.As(err, &ne) || !strings.Contains(err.Error(), `"T|1" sequence nr 2`) {
		t.Fatalf("error = %v", err)
	}
}

func TestProtobufCustomResolver(t *testing.T) {
	// A zero Registry built from pieces: protobuf knowing StringValue only.
	var types protoregistry.Types
	if err := types.RegisterMessage((&wrapperspb.StringValue{}).ProtoReflect().Type()); err != nil {
		t.Fatal(err)
	}
	var r serialization.Registry
	if err := r.Register(serialization.Protobuf(&types)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		value  proto.Message
		wantOK bool
	}{
		{"known to resolver", wrapperspb.String("x"), true},
		{"unknown to resolver", timestamppb.Now(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			payload, id, manifest, err := r.Serialize(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Deserialize(payload, id, manifest)
			if tt.wantOK {
				if err != nil {
					t.Fatal(err)
				}
				assertEqual(t, got, tt.value)
				return
			}
			if !errors.Is(err, serialization.ErrUnknownManifest) || !errors.Is(err, protoregistry.NotFound) {
				t.Fatalf("error = %v, want ErrUnknownManifest wrapping protoregistry.NotFound", err)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	r := newRegistry(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				v := ItemAdded{SKU: fmt.Sprint(g), Quantity: i}
				p, id, m, err := r.Serialize(v)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := r.Deserialize(p, id, m)
				if err != nil || !reflect.DeepEqual(got, v) {
					t.Errorf("round trip: %v, %v", got, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		if err := r.Register(celsiusSerializer{}); err != nil {
			t.Error(err)
		}
		if err := r.Bind(reflect.TypeFor[Celsius](), celsiusID); err != nil {
			t.Error(err)
		}
		if err := serialization.RegisterJSON[unregistered](r, "u"); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
}

// TestLegacyJSONIDIsRead: payloads written under the id Annals' JSON
// serializer used before it took jackson-json's (33) still decode, while
// new payloads carry 31, Pekko's jackson-json id.
func TestLegacyJSONIDIsRead(t *testing.T) {
	type Legacy struct{ N int }
	r := serialization.NewRegistry()
	if err := serialization.RegisterJSON[Legacy](r, "legacy.N"); err != nil {
		t.Fatal(err)
	}
	payload, id, manifest, err := r.Serialize(Legacy{N: 7})
	if err != nil || id != 31 || manifest != "legacy.N" {
		t.Fatalf("Serialize = %s, %d, %q, %v; want id 31", payload, id, manifest, err)
	}
	for _, id := range []int32{serialization.JSONID, serialization.LegacyJSONID} {
		v, err := r.Deserialize(payload, id, manifest)
		if err != nil || v != (Legacy{N: 7}) {
			t.Errorf("Deserialize with id %d = %v, %v; want {7}", id, v, err)
		}
	}
}

// Pekko's fixture types (../shared/fixtures/pekko-r2dbc): Java records
// serialized by jackson-json under their class names.
type (
	pekkoAdded struct {
		N    int    `json:"n"`
		Text string `json:"text"`
	}
	pekkoRenamed struct {
		Name string `json:"name"`
	}
)

// TestPekkoJSONPayloads: the event payloads a real Pekko R2DBC service
// wrote (jackson-json, id 31, the class name as manifest) decode into Go
// types registered under the class names, the emoji Jackson escaped as a
// surrogate pair included; and a payload over 32 KiB gzipped as Pekko's
// jackson-json does decodes too.
func TestPekkoJSONPayloads(t *testing.T) {
	r := serialization.NewRegistry()
	if err := serialization.RegisterJSON[pekkoAdded](r, "anchor.Fixture$Added"); err != nil {
		t.Fatal(err)
	}
	if err := serialization.RegisterJSON[pekkoRenamed](r, "anchor.Fixture$Renamed"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(fixtures.Dir(t, "pekko-r2dbc"), "event_journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	decoded := map[string]any{}
	for line := range strings.Lines(string(data)) {
		var row struct {
			PersistenceID string `json:"persistence_id"`
			SeqNr         int64  `json:"seq_nr"`
			SerID         int32  `json:"event_ser_id"`
			Manifest      string `json:"event_ser_manifest"`
			Payload       string `json:"event_payload"`
			Deleted       bool   `json:"deleted"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		if row.Deleted {
			continue // a delete marker: no payload
		}
		payload, err := hex.DecodeString(row.Payload)
		if err != nil {
			t.Fatal(err)
		}
		v, err := r.Deserialize(payload, row.SerID, row.Manifest)
		if err != nil {
			t.Errorf("%s #%d: %v", row.PersistenceID, row.SeqNr, err)
			continue
		}
		decoded[fmt.Sprintf("%s#%d", row.PersistenceID, row.SeqNr)] = v
	}
	for key, want := range map[string]any{
		"Fixture|f-1#1":    pekkoAdded{N: 1, Text: "one"},
		"Fixture|f-1#3":    pekkoRenamed{Name: "alpha"},
		"Fixture|ünï-ç#1":  pekkoAdded{N: 1, Text: "ünï-ç 日本 😀"},
		"Fixture|ünï-ç#2":  pekkoAdded{N: 2, Text: "second ß"},
		"FixtureR|r-1|A#2": pekkoRenamed{Name: "gamma"},
	} {
		if got := decoded[key]; got != want {
			t.Errorf("%s decoded to %#v, want %#v", key, got, want)
		}
	}

	big := pekkoAdded{N: 9, Text: strings.Repeat("x", 40<<10)}
	plain, _ := json.Marshal(big)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(plain)
	zw.Close()
	if !serialization.IsGzip(zipped.Bytes()) || serialization.IsGzip(plain) {
		t.Fatal("IsGzip does not tell gzip from JSON")
	}
	v, err := r.Deserialize(zipped.Bytes(), serialization.JSONID, "anchor.Fixture$Added")
	if err != nil || v != big {
		t.Errorf("a gzipped payload of %d bytes: %v", len(plain), err)
	}
	if _, err := r.Deserialize([]byte{0x1f, 0x8b, 1, 2, 3}, serialization.JSONID, "anchor.Fixture$Added"); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("a broken gzip payload: %v, want an error naming gzip", err)
	}
	out, _, _, err := r.Serialize(big)
	if err != nil || serialization.IsGzip(out) {
		t.Errorf("Serialize compressed a large payload (%v): Annals writes plain JSON", err)
	}
}
