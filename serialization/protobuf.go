package serialization

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// MessageTypeResolver finds protobuf message types by full name, as the
// [Protobuf] serializer needs to decode a payload. *protoregistry.Types, and
// so protoregistry.GlobalTypes, implement it.
//
// FindMessageByName returns an error wrapping protoregistry.NotFound when it
// does not know the name. It is safe for concurrent use.
type MessageTypeResolver interface {
	FindMessageByName(message protoreflect.FullName) (protoreflect.MessageType, error)
}

// Protobuf returns the serializer for protobuf messages, id [ProtobufID].
//
// It handles any proto.Message. The manifest is the message's full name
// (for example "google.protobuf.StringValue"). Marshal uses deterministic
// encoding, so equal messages give equal bytes within one binary. Unmarshal
// looks the manifest up in resolver and returns a new message of that type
// (a pointer, such as *wrapperspb.StringValue); a name the resolver does not
// know wraps [ErrUnknownManifest]. A nil resolver means
// protoregistry.GlobalTypes, where generated code registers every linked-in
// message type.
func Protobuf(resolver MessageTypeResolver) Serializer {
	if resolver == nil {
		resolver = protoregistry.GlobalTypes
	}
	return protobufSerializer{resolver: resolver}
}

type protobufSerializer struct {
	resolver MessageTypeResolver
}

func (protobufSerializer) ID() int32 { return ProtobufID }

func (protobufSerializer) Manifest(v any) (string, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return "", notSerializable(v, "protobuf serializer takes proto.Message only")
	}
	return string(m.ProtoReflect().Descriptor().FullName()), nil
}

func (protobufSerializer) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, notSerializable(v, "protobuf serializer takes proto.Message only")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("serialization: protobuf marshal %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return b, nil
}

func (s protobufSerializer) Unmarshal(data []byte, manifest string) (any, error) {
	name := protoreflect.FullName(manifest)
	if !name.IsValid() {
		return nil, fmt.Errorf("%w: %q is not a protobuf message name", ErrUnknownManifest, manifest)
	}
	mt, err := s.resolver.FindMessageByName(name)
	switch {
	case errors.Is(err, protoregistry.NotFound):
		return nil, fmt.Errorf("%w: protobuf message %q: %w", ErrUnknownManifest, manifest, err)
	case err != nil:
		return nil, fmt.Errorf("serialization: resolve protobuf message %q: %w", manifest, err)
	case mt == nil:
		return nil, fmt.Errorf("%w: protobuf message %q", ErrUnknownManifest, manifest)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("serialization: protobuf unmarshal %s: %w", manifest, err)
	}
	return m, nil
}
