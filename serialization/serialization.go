// Package serialization turns events and snapshots into bytes and back.
//
// Stores keep every payload as bytes together with a serializer id (an
// int32 naming the [Serializer] that produced the bytes) and a manifest (a
// string telling that serializer which type the bytes hold). A [Registry]
// picks the serializer for a value when it is written and finds it again by
// id when the payload is read.
//
// Three serializers are built in, under Akka's ids so that stored data is
// recognizable across systems:
//
//   - [Bytes] ([BytesID]) stores a []byte as is, with an empty manifest.
//   - [Protobuf] ([ProtobufID]) stores any proto.Message; the manifest is the
//     message's full name.
//   - [JSON] ([JSONID]) stores values of types registered with
//     [RegisterJSON]; the manifest is the name given at registration.
//
// Errors returned by this package wrap one of the sentinel errors
// ([ErrUnknownSerializer], [ErrUnknownManifest], [ErrNotSerializable],
// [ErrDuplicate], [ErrInvalidArgument]) or the underlying encoder's error, and
// can be tested with errors.Is and errors.As. Every failure to decode a
// payload is a [*DecodeError].
package serialization

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Serializer turns values into bytes and back.
//
// Rules every implementation keeps:
//
//   - ID is constant for the life of the serializer and unique within a
//     [Registry]. It is stored beside every payload, so it must never change
//     once data has been written with it. Ids below 100 are reserved for
//     Annals and Akka; custom serializers use ids of 100 and above.
//   - Manifest returns the string that, given to Unmarshal together with the
//     bytes from Marshal, lets Unmarshal rebuild a value equal to v. It may be
//     empty when the serializer needs no type information. For a value the
//     serializer cannot handle, Manifest and Marshal return an error wrapping
//     [ErrNotSerializable].
//   - Marshal returns bytes the caller may keep and modify; they do not alias
//     v.
//   - Unmarshal does not keep or modify data. For a manifest it does not
//     know it returns an error wrapping [ErrUnknownManifest]; for bytes it
//     cannot decode it returns an error wrapping the decoder's error.
//   - All methods are safe for concurrent use and never panic.
type Serializer interface {
	// ID returns the serializer's unique, stable id.
	ID() int32
	// Manifest returns the manifest stored beside v's bytes.
	Manifest(v any) (string, error)
	// Marshal returns v's bytes.
	Marshal(v any) ([]byte, error)
	// Unmarshal rebuilds the value that data and manifest describe.
	Unmarshal(data []byte, manifest string) (any, error)
}

// Ids of the built-in serializers. They are Akka's and Pekko's ids for the
// same formats, so data written by either system is recognizable by the
// other.
const (
	// ProtobufID is the id of the [Protobuf] serializer.
	ProtobufID int32 = 2
	// BytesID is the id of the [Bytes] serializer.
	BytesID int32 = 4
	// JSONID is the id of the [JSON] serializer: Akka's and Pekko's
	// jackson-json.
	JSONID int32 = 31
	// LegacyJSONID is the id Annals' JSON serializer wrote before it took
	// jackson-json's (33 is jackson-cbor's in Akka and Pekko). A registry
	// from [NewRegistry] reads payloads with it through the [JSON]
	// serializer; nothing is written with it. Pekko's CBOR payloads are not
	// readable: they fail to decode with an error naming the id.
	LegacyJSONID int32 = 33
)

var (
	// ErrUnknownSerializer reports a serializer id that is not registered in
	// the registry.
	ErrUnknownSerializer = errors.New("serialization: unknown serializer")
	// ErrUnknownManifest reports a manifest the serializer does not know.
	ErrUnknownManifest = errors.New("serialization: unknown manifest")
	// ErrNotSerializable reports a value for whose type no serializer is
	// bound, or a value a serializer cannot handle. The error's message names
	// the Go type.
	ErrNotSerializable = errors.New("serialization: not serializable")
	// ErrDuplicate reports a second registration of a serializer id, a
	// manifest, a type, or a type binding.
	ErrDuplicate = errors.New("serialization: already registered")
	// ErrInvalidArgument reports a registration argument that breaks the
	// contract: a nil serializer or type, an interface type, or a type that
	// has no name when no manifest is given.
	ErrInvalidArgument = errors.New("serialization: invalid argument")
)

// DecodeError reports a payload that could not be turned back into a value.
//
// Its message names the serializer id, the manifest and, when known (that
// is, when the payload came from a journal event or a snapshot), the
// persistence id and sequence number. Unwrap returns the cause:
// [ErrUnknownSerializer] when no serializer has the id, an error wrapping
// [ErrUnknownManifest] when the serializer does not know the manifest, or
// the error of the serializer's decoder.
type DecodeError struct {
	// PersistenceID is the persistence id of the event or snapshot the
	// payload belongs to; empty when unknown.
	PersistenceID string
	// SequenceNr is the sequence number of the event or snapshot; 0 when
	// unknown.
	SequenceNr int64
	// SerializerID is the serializer id stored beside the payload.
	SerializerID int32
	// Manifest is the manifest stored beside the payload.
	Manifest string
	// Err is the cause; never nil in errors returned by this package.
	Err error
}

// Error returns a message naming the serializer id, the manifest, the
// persistence id and sequence number when known, and the cause.
func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("serialization: cannot decode payload")
	if e.PersistenceID != "" || e.SequenceNr != 0 {
		fmt.Fprintf(&b, " of persistence id %q sequence nr %d", e.PersistenceID, e.SequenceNr)
	}
	fmt.Fprintf(&b, " (serializer id %d, manifest %q)", e.SerializerID, e.Manifest)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// typeName names t for messages and default manifests: the package path and
// name for a named type declared in a package, t.String() otherwise.
func typeName(t reflect.Type) string {
	if t == nil {
		return "<nil>"
	}
	if t.Name() != "" && t.PkgPath() != "" {
		return t.PkgPath() + "." + t.Name()
	}
	return t.String()
}

// notSerializable returns an error wrapping ErrNotSerializable naming v's
// type.
func notSerializable(v any, why string) error {
	return fmt.Errorf("%w: %s: %s", ErrNotSerializable, typeName(reflect.TypeOf(v)), why)
}
