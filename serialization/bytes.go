package serialization

import "fmt"

// Bytes returns the serializer for raw byte slices, id [BytesID].
//
// It handles values of type []byte only (not named byte-slice types; bind
// those to a custom serializer). The manifest is always empty. Marshal
// returns a copy of the slice; Unmarshal accepts only the empty manifest
// (any other wraps [ErrUnknownManifest]) and returns a copy of data as a
// []byte, never nil.
func Bytes() Serializer { return bytesSerializer{} }

type bytesSerializer struct{}

func (bytesSerializer) ID() int32 { return BytesID }

func (bytesSerializer) Manifest(v any) (string, error) {
	if _, ok := v.([]byte); !ok {
		return "", notSerializable(v, "bytes serializer takes []byte only")
	}
	return "", nil
}

func (bytesSerializer) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, notSerializable(v, "bytes serializer takes []byte only")
	}
	return append([]byte{}, b...), nil
}

func (bytesSerializer) Unmarshal(data []byte, manifest string) (any, error) {
	if manifest != "" {
		return nil, fmt.Errorf("%w: %q: bytes serializer uses the empty manifest", ErrUnknownManifest, manifest)
	}
	return append([]byte{}, data...), nil
}
