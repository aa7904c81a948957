package postgres

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// cells is a column of rows the write statements send as one array
// parameter. pgx encodes it through pgtype.ArrayGetter, reading each
// element through P, a pointer into the slice whose type implements one
// of pgtype's valuer interfaces. Given a plain []string, []int64 or
// []time.Time, pgx copies every element into an interface to encode it:
// an allocation per element, a few hundred per write call. A nil cells
// is the SQL NULL array.
type cells[E any, P interface{ *E }] []E

// Dimensions implements pgtype.ArrayGetter: one dimension from 1, none
// (NULL) for a nil column.
func (c cells[E, P]) Dimensions() []pgtype.ArrayDimension {
	if c == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(c)), LowerBound: 1}}
}

// Index implements pgtype.ArrayGetter: a pointer to element i.
func (c cells[E, P]) Index(i int) any { return P(&c[i]) }

// IndexType implements pgtype.ArrayGetter.
func (c cells[E, P]) IndexType() any { return P(nil) }

// registerCells maps each cells type to its PostgreSQL array type in m, a
// connection's type map. pgx needs it in the query modes that encode a
// parameter without the server's description of the statement
// (default_query_exec_mode=exec or simple_protocol, which some connection
// poolers call for): there it finds the parameter's type from its Go
// type. In the other modes the statement's description gives it.
func registerCells(m *pgtype.Map) {
	m.RegisterDefaultPgType(textCells(nil), "_text")
	m.RegisterDefaultPgType(nullTexts(nil), "_text")
	m.RegisterDefaultPgType(int8Cells(nil), "_int8")
	m.RegisterDefaultPgType(int4Cells(nil), "_int4")
	m.RegisterDefaultPgType(timeCells(nil), "_timestamptz")
	m.RegisterDefaultPgType(stampCells(nil), "_timestamptz")
	m.RegisterDefaultPgType(bytesCells(nil), "_bytea")
}

// The columns of the write statements, by element type.
type (
	textCells  = cells[textCell, *textCell]
	int8Cells  = cells[int8Cell, *int8Cell]
	int4Cells  = cells[int4Cell, *int4Cell]
	timeCells  = cells[timeCell, *timeCell]
	bytesCells = cells[bytesCell, *bytesCell]
	stampCells = cells[pgtype.Timestamptz, *pgtype.Timestamptz] // NULL where not Valid
	nullTexts  = cells[pgtype.Text, *pgtype.Text]               // NULL where not Valid
)

// textCell is an element of a text[] parameter.
type textCell string

// TextValue implements pgtype.TextValuer.
func (c *textCell) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*c), Valid: true}, nil
}

// int8Cell is an element of a bigint[] parameter.
type int8Cell int64

// Int64Value implements pgtype.Int64Valuer.
func (c *int8Cell) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*c), Valid: true}, nil
}

// int4Cell is an element of an int[] parameter.
type int4Cell int32

// Int64Value implements pgtype.Int64Valuer.
func (c *int4Cell) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*c), Valid: true}, nil
}

// timeCell is an element of a timestamptz[] parameter.
type timeCell time.Time

// TimestamptzValue implements pgtype.TimestamptzValuer.
func (c *timeCell) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*c), Valid: true}, nil
}

// bytesCell is an element of a bytea[] parameter: NULL when nil.
type bytesCell []byte

// BytesValue implements pgtype.BytesValuer.
func (c *bytesCell) BytesValue() ([]byte, error) { return *c, nil }
