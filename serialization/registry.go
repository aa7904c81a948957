package serialization

import (
	"fmt"
	"reflect"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
)

// Registry holds serializers by id and chooses one for each value.
//
// Use [NewRegistry] for a registry with the built-in serializers. The zero
// Registry is empty and ready to use: register the pieces you want (for
// example [Protobuf] with your own resolver) with [Registry.Register].
// Serializers cannot be removed or replaced once registered, so an id found
// once always names the same serializer.
//
// A Registry is safe for concurrent use, including registration and binding
// while other goroutines serialize; but register and bind everything before
// the first write, so that every value is written with the serializer meant
// for it. A Registry must not be copied after first use.
type Registry struct {
	mu       sync.RWMutex
	byID     map[int32]Serializer
	bindings map[reflect.Type]int32
}

// NewRegistry returns a registry with the built-in serializers registered:
// [Bytes] under [BytesID], [JSON] (with no types yet; see [RegisterJSON])
// under [JSONID] (and, for reading, [LegacyJSONID]), and [Protobuf] with
// protoregistry.GlobalTypes under [ProtobufID].
func NewRegistry() *Registry {
	r := &Registry{byID: make(map[int32]Serializer, 4)}
	for _, s := range []Serializer{Bytes(), JSON(), Protobuf(nil)} {
		r.byID[s.ID()] = s
	}
	r.byID[LegacyJSONID] = r.byID[JSONID] // reads what earlier versions wrote
	return r
}

// Register adds a custom serializer under s.ID(). It returns an error
// wrapping [ErrDuplicate] if a serializer already has that id (the built-in
// ids are taken in a registry from [NewRegistry]), and [ErrInvalidArgument]
// if s is nil.
func (r *Registry) Register(s Serializer) error {
	if s == nil {
		return fmt.Errorf("%w: nil serializer", ErrInvalidArgument)
	}
	id := s.ID()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[id]; ok {
		return fmt.Errorf("%w: serializer id %d", ErrDuplicate, id)
	}
	if r.byID == nil {
		r.byID = make(map[int32]Serializer)
	}
	r.byID[id] = s
	return nil
}

// Bind makes values whose dynamic type is exactly t use the serializer with
// id serializerID. A binding takes precedence over every built-in rule of
// [Registry.Serialize]; the serializer must accept values of type t.
//
// Bind returns an error wrapping [ErrUnknownSerializer] if no serializer has
// that id, [ErrDuplicate] if t is already bound, and [ErrInvalidArgument]
// if t is nil or an interface type (no value has an interface as its
// dynamic type).
func (r *Registry) Bind(t reflect.Type, serializerID int32) error {
	if t == nil {
		return fmt.Errorf("%w: Bind: nil type", ErrInvalidArgument)
	}
	if t.Kind() == reflect.Interface {
		return fmt.Errorf("%w: Bind: interface type %s; bind the concrete types", ErrInvalidArgument, typeName(t))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[serializerID]; !ok {
		return fmt.Errorf("%w: Bind %s to serializer id %d", ErrUnknownSerializer, typeName(t), serializerID)
	}
	if id, ok := r.bindings[t]; ok {
		return fmt.Errorf("%w: type %s is bound to serializer id %d", ErrDuplicate, typeName(t), id)
	}
	if r.bindings == nil {
		r.bindings = make(map[reflect.Type]int32)
	}
	r.bindings[t] = serializerID
	return nil
}

// Serializer returns the serializer registered under id, and whether there
// is one.
func (r *Registry) Serializer(id int32) (Serializer, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.byID[id]
	return s, ok
}

// Serialize turns v into a payload and returns it with the id of the
// serializer used and the manifest to store beside it.
//
// The serializer is chosen by v's dynamic type, first rule that applies:
//
//  1. the serializer bound to the type with [Registry.Bind];
//  2. a []byte: the serializer under [BytesID] (manifest "");
//  3. a proto.Message: the serializer under [ProtobufID] (manifest: the
//     message's full name);
//  4. a type registered with [RegisterJSON]: the serializer under [JSONID].
//
// A rule whose serializer is not registered does not apply. If no rule
// applies (or v is nil), Serialize returns an error wrapping
// [ErrNotSerializable] that names v's Go type. Errors of the chosen
// serializer are returned wrapped, with the type and serializer id.
func (r *Registry) Serialize(v any) (payload []byte, serializerID int32, manifest string, err error) {
	if v == nil {
		return nil, 0, "", fmt.Errorf("%w: nil value", ErrNotSerializable)
	}
	s := r.choose(v)
	if s == nil {
		return nil, 0, "", fmt.Errorf("%w: no serializer for Go type %s", ErrNotSerializable, typeName(reflect.TypeOf(v)))
	}
	manifest, err = s.Manifest(v)
	if err != nil {
		return nil, 0, "", fmt.Errorf("serialization: manifest of %s with serializer id %d: %w", typeName(reflect.TypeOf(v)), s.ID(), err)
	}
	payload, err = s.Marshal(v)
	if err != nil {
		return nil, 0, "", fmt.Errorf("serialization: marshal %s with serializer id %d: %w", typeName(reflect.TypeOf(v)), s.ID(), err)
	}
	return payload, s.ID(), manifest, nil
}

// choose returns the serializer for v by the rules of Serialize, or nil.
func (r *Registry) choose(v any) Serializer {
	t := reflect.TypeOf(v)
	r.mu.RLock()
	defer r.mu.RUnlock()
	if id, ok := r.bindings[t]; ok {
		if s, ok := r.byID[id]; ok {
			return s
		}
	}
	if _, ok := v.([]byte); ok {
		if s, ok := r.byID[BytesID]; ok {
			return s
		}
	}
	if _, ok := v.(proto.Message); ok {
		if s, ok := r.byID[ProtobufID]; ok {
			return s
		}
	}
	if s, ok := r.byID[JSONID].(*jsonSerializer); ok {
		if _, ok := s.manifestOf(t); ok {
			return s
		}
	}
	return nil
}

// Deserialize turns a payload back into a value with the serializer
// registered under serializerID. Every error is a [*DecodeError] naming
// serializerID and manifest; it wraps [ErrUnknownSerializer] if no
// serializer has that id, and otherwise the serializer's error (such as one
// wrapping [ErrUnknownManifest], or the decoder's error for corrupt bytes).
// payload is not modified or kept.
func (r *Registry) Deserialize(payload []byte, serializerID int32, manifest string) (any, error) {
	return r.decode(payload, serializerID, manifest, "", 0)
}

// DeserializeRepr deserializes the payload of a journal event like
// [Registry.Deserialize]; its [*DecodeError] also names the event's
// persistence id and sequence number.
func (r *Registry) DeserializeRepr(e journal.Repr) (any, error) {
	return r.decode(e.Payload, e.SerializerID, e.Manifest, e.PersistenceID, e.SequenceNr)
}

// DeserializeSnapshot deserializes the state of a snapshot like
// [Registry.Deserialize]; its [*DecodeError] also names the snapshot's
// persistence id and sequence number.
func (r *Registry) DeserializeSnapshot(s snapshot.Snapshot) (any, error) {
	return r.decode(s.Payload, s.SerializerID, s.Manifest, s.Metadata.PersistenceID, s.Metadata.SequenceNr)
}

func (r *Registry) decode(payload []byte, id int32, manifest, pid string, seq int64) (any, error) {
	fail := func(err error) error {
		return &DecodeError{PersistenceID: pid, SequenceNr: seq, SerializerID: id, Manifest: manifest, Err: err}
	}
	s, ok := r.Serializer(id)
	if !ok {
		return nil, fail(ErrUnknownSerializer)
	}
	v, err := s.Unmarshal(payload, manifest)
	if err != nil {
		return nil, fail(err)
	}
	return v, nil
}
