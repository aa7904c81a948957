package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/serialization"
)

// verifyRegistry is what annals verify checks payloads against: the
// serializer ids a service's registry has, the manifests it accepts for
// some of them, and a registry that decodes what annals has types for.
//
// Rules:
//   - The built-in serializers (serialization.NewRegistry: bytes 4,
//     protobuf 2, JSON 31 and the legacy JSON 33) are always known; every
//     other id only when --registry names it.
//   - A payload whose serializer id is not known is a problem: recovery
//     through such a registry fails on it.
//   - When the registry names manifests for an id (--registry ID:M,...,
//     or demo for JSON), a payload of that id with another manifest is a
//     problem; otherwise its manifest is not checked by name.
//   - A payload is decoded when annals has a decoder and a type for it:
//     bytes always, protobuf messages linked into annals, the demo's
//     events and state with --registry demo. A payload that fails to
//     decode for another reason than an unknown manifest is a problem;
//     one whose manifest the decoder has no type for is counted as not
//     decoded (a service may read it through an event adapter).
type verifyRegistry struct {
	decoder *serialization.Registry
	known   map[int32]*knownSerializer
	demo    bool
}

// knownSerializer is one serializer id of a verifyRegistry.
type knownSerializer struct {
	// manifests is nil when the registry names none for the id: then
	// manifests are not checked by name.
	manifests map[string]bool
}

// registrySpecHelp is how --registry is given.
const registrySpecHelp = "demo, ID, ID:MANIFEST[,MANIFEST...] (an empty MANIFEST is the empty manifest) or @FILE (one of those per line; # starts a comment)"

// newVerifyRegistry returns the built-in registry with what specs name.
func newVerifyRegistry(specs []string) (*verifyRegistry, error) {
	r := &verifyRegistry{decoder: serialization.NewRegistry(), known: map[int32]*knownSerializer{}}
	for _, id := range []int32{serialization.ProtobufID, serialization.BytesID, serialization.JSONID, serialization.LegacyJSONID} {
		r.known[id] = &knownSerializer{}
	}
	for _, spec := range specs {
		if path, ok := strings.CutPrefix(spec, "@"); ok {
			if err := r.addFile(path); err != nil {
				return nil, err
			}
			continue
		}
		if err := r.add(spec); err != nil {
			return nil, usagef("--registry %q: %v", spec, err)
		}
	}
	return r, nil
}

// addFile adds the specs of a file, one per line.
func (r *verifyRegistry) addFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return usagef("--registry @%s: %v", path, err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for n := 1; lines.Scan(); n++ {
		line, _, _ := strings.Cut(lines.Text(), "#")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if strings.HasPrefix(line, "@") {
			return usagef("--registry @%s, line %d: %q: a file cannot name another file", path, n, line)
		}
		if err := r.add(line); err != nil {
			return usagef("--registry @%s, line %d: %q: %v", path, n, line, err)
		}
	}
	if err := lines.Err(); err != nil {
		return fmt.Errorf("--registry @%s: %w", path, err)
	}
	return nil
}

// add adds one spec: demo, ID or ID:MANIFEST[,MANIFEST...].
func (r *verifyRegistry) add(spec string) error {
	if spec == "demo" {
		if r.demo {
			return nil
		}
		r.demo = true
		if err := bank.Register(r.decoder); err != nil {
			return err
		}
		// The demo's JSON payloads, and the first Deposited's manifest,
		// which the account behavior reads through an adapter.
		for _, id := range []int32{serialization.JSONID, serialization.LegacyJSONID} {
			r.manifests(id, bank.ManifestDeposited, bank.ManifestWithdrawn, bank.ManifestAccount, bank.ManifestDepositedV1)
		}
		return nil
	}
	idText, list, named := strings.Cut(spec, ":")
	id, err := strconv.ParseInt(strings.TrimSpace(idText), 10, 32)
	if err != nil {
		return fmt.Errorf("want %s", registrySpecHelp)
	}
	if r.known[int32(id)] == nil {
		r.known[int32(id)] = &knownSerializer{}
	}
	if named {
		r.manifests(int32(id), strings.Split(list, ",")...)
	}
	return nil
}

// manifests adds manifests to those the registry accepts for id.
func (r *verifyRegistry) manifests(id int32, manifests ...string) {
	k := r.known[id]
	if k == nil {
		k = &knownSerializer{}
		r.known[id] = k
	}
	if k.manifests == nil {
		k.manifests = map[string]bool{}
	}
	for _, m := range manifests {
		k.manifests[m] = true
	}
}

// payloadStats is what verify did with the payloads of one serializer id.
type payloadStats struct {
	SerializerID int32  `json:"serializer_id"`
	Name         string `json:"name,omitempty"`
	// Known: the id is in the registry.
	Known    bool  `json:"known"`
	Payloads int64 `json:"payloads"`
	// ManifestsChecked counts the payloads whose manifest was checked
	// against the manifests the registry names for the id.
	ManifestsChecked int64 `json:"manifests_checked"`
	// Decoded counts the payloads turned into values.
	Decoded int64 `json:"decoded"`
}

// payloadChecker checks payloads against a registry, counting per id.
type payloadChecker struct {
	reg   *verifyRegistry
	stats map[int32]*payloadStats
}

func newPayloadChecker(reg *verifyRegistry) *payloadChecker {
	return &payloadChecker{reg: reg, stats: map[int32]*payloadStats{}}
}

// check checks one payload and returns what is wrong with it, "" when
// nothing is.
func (c *payloadChecker) check(id int32, manifest string, payload []byte) string {
	st := c.stats[id]
	if st == nil {
		st = &payloadStats{SerializerID: id, Name: serializerName(id), Known: c.reg.known[id] != nil}
		c.stats[id] = st
	}
	st.Payloads++
	k := c.reg.known[id]
	if k == nil {
		return fmt.Sprintf("serializer %d is not in the registry (manifest %q): recovery cannot decode it (--registry %d if your services register it)", id, manifest, id)
	}
	if k.manifests != nil {
		st.ManifestsChecked++
		if !k.manifests[manifest] {
			return fmt.Sprintf("manifest %q is not one the registry knows for serializer %s", manifest, serializerLabel(id))
		}
	}
	if _, ok := c.reg.decoder.Serializer(id); !ok {
		return "" // named by --registry; annals has no decoder for it
	}
	_, err := c.reg.decoder.Deserialize(payload, id, manifest)
	switch {
	case err == nil:
		st.Decoded++
	case errors.Is(err, serialization.ErrUnknownManifest):
		// No type for it here: not decoded.
	default:
		return fmt.Sprintf("the payload does not decode: %v", err)
	}
	return ""
}

// summary returns the payloads read, the figures per serializer id
// (ascending) and what was not checked, in words.
func (c *payloadChecker) summary() (read int64, stats []payloadStats, notChecked []string) {
	for _, st := range c.stats {
		read += st.Payloads
		stats = append(stats, *st)
	}
	slices.SortFunc(stats, func(a, b payloadStats) int { return int(a.SerializerID) - int(b.SerializerID) })
	notChecked = []string{}
	for _, st := range stats {
		left := st.Payloads - st.Decoded
		if !st.Known || left == 0 {
			continue
		}
		what := fmt.Sprintf("serializer %s: %s of %s payloads not decoded", serializerLabel(st.SerializerID), num(left), num(st.Payloads))
		_, decodes := c.reg.decoder.Serializer(st.SerializerID)
		why := "annals has no types for their manifests"
		switch {
		case !decodes:
			why = "annals has no decoder for this id"
		case st.SerializerID == serialization.BytesID:
			why = "the bytes serializer reads the empty manifest only; a service reads others through event adapters"
		}
		if st.ManifestsChecked == st.Payloads {
			notChecked = append(notChecked, fmt.Sprintf("%s (%s); their manifests were checked against --registry", what, why))
			continue
		}
		notChecked = append(notChecked, fmt.Sprintf("%s and their manifests not checked (%s; --registry %d:MANIFEST,... names the manifests to accept)", what, why, st.SerializerID))
	}
	return read, stats, notChecked
}

// serializerName names the built-in serializers' ids; "" for others.
func serializerName(id int32) string {
	if s := serializerText(id); s != strconv.Itoa(int(id)) {
		return s
	}
	return ""
}

// serializerLabel is an id with its name: "31 (json)", "77".
func serializerLabel(id int32) string {
	if n := serializerName(id); n != "" {
		return fmt.Sprintf("%d (%s)", id, n)
	}
	return strconv.Itoa(int(id))
}
