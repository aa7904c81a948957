// Package annals holds the identity rules every part of Annals shares:
// persistence ids, entity types and slices.
//
// A persistence id names one entity's journal. By default it is
// "EntityType|EntityID" (see [PersistenceID]). Slices partition the space of
// persistence ids into [NumberOfSlices] buckets so that projections can split
// work; Annals computes them exactly as Akka does, so the same id lands in the
// same slice in both systems.
//
// This package imports nothing else from Annals; every other package may
// import it.
package annals

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// NumberOfSlices is the number of slices persistence ids are spread over.
// It is fixed at 1024, Akka's value, so slices agree across systems.
const NumberOfSlices = 1024

// Separator divides the entity type from the entity id in a persistence id.
const Separator = "|"

// ErrInvalidSliceRanges reports a number of slice ranges that does not divide
// [NumberOfSlices] evenly.
var ErrInvalidSliceRanges = errors.New("annals: invalid number of slice ranges")

// PersistenceID returns "entityType|entityID", the default persistence id of
// an entity.
func PersistenceID(entityType, entityID string) string {
	return entityType + Separator + entityID
}

// ErrInvalidEntityType reports an entity type that cannot start persistence
// ids: see [CheckEntityType].
var ErrInvalidEntityType = errors.New("annals: invalid entity type")

// CheckEntityType checks the rules for an entity type: not empty, valid
// UTF-8, no NUL byte, and no [Separator] (the events of a type "A|B" would
// belong to type "A" in every query by type). It returns an error wrapping
// ErrInvalidEntityType that names the problem.
func CheckEntityType(entityType string) error {
	switch {
	case entityType == "":
		return fmt.Errorf("%w: empty", ErrInvalidEntityType)
	case !utf8.ValidString(entityType):
		return fmt.Errorf("%w %q: not valid UTF-8", ErrInvalidEntityType, entityType)
	case strings.ContainsRune(entityType, 0):
		return fmt.Errorf("%w %q: contains a NUL byte", ErrInvalidEntityType, entityType)
	case strings.Contains(entityType, Separator):
		return fmt.Errorf("%w %q: contains the separator %q, so its ids would read as type %q", ErrInvalidEntityType, entityType, Separator, EntityType(entityType))
	}
	return nil
}

// EntityType returns the entity type of a persistence id: the part before the
// first [Separator], or the whole id when it has none (Akka's rule).
func EntityType(persistenceID string) string {
	if i := strings.Index(persistenceID, Separator); i >= 0 {
		return persistenceID[:i]
	}
	return persistenceID
}

// Slice returns the slice of a persistence id, in 0..NumberOfSlices-1.
//
// It is abs(h % 1024) where h is Java's String.hashCode of the id: 31-based,
// over UTF-16 code units, with int32 overflow. The result equals Akka's
// Persistence.sliceForPersistenceId for the same id.
func Slice(persistenceID string) int {
	var h int32
	for _, r := range persistenceID {
		if r1, r2 := utf16.EncodeRune(r); r1 != '\uFFFD' {
			h = 31*h + r1
			h = 31*h + r2
		} else {
			h = 31*h + int32(r)
		}
	}
	s := h % NumberOfSlices
	if s < 0 {
		s = -s
	}
	return int(s)
}

// SliceRange is an inclusive range of slices.
type SliceRange struct {
	Min, Max int
}

// Contains reports whether slice s lies within the range.
func (r SliceRange) Contains(s int) bool { return s >= r.Min && s <= r.Max }

// String returns "min-max".
func (r SliceRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// SliceRanges splits 0..NumberOfSlices-1 into n equal, contiguous ranges, in
// ascending order, as Akka's sliceRanges does. n must divide NumberOfSlices
// (1, 2, 4, ... 1024); any other n returns an error wrapping
// [ErrInvalidSliceRanges].
func SliceRanges(n int) ([]SliceRange, error) {
	if n < 1 || n > NumberOfSlices || NumberOfSlices%n != 0 {
		return nil, fmt.Errorf("%w: %d (must divide %d evenly)", ErrInvalidSliceRanges, n, NumberOfSlices)
	}
	size := NumberOfSlices / n
	ranges := make([]SliceRange, n)
	for i := range ranges {
		ranges[i] = SliceRange{Min: i * size, Max: (i+1)*size - 1}
	}
	return ranges, nil
}
