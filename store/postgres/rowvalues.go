package postgres

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// rowValues decodes the values of a row read with pgx.Rows.RawValues:
// the binary forms of the types a journal's columns have (integers,
// timestamps, text, bytea) by hand, each in a few instructions, and
// anything else (another type or format, an array, an infinite
// timestamp) through the connection's pgtype.Map, which plans a scan per
// value. pgx's Rows.Scan plans each column again for every statement it
// reads, and allocates every string: a recovery's rows repeat their
// manifest and writer, which rowValues keeps once (see text). A codec
// registered on the connection for those types is not consulted for their
// binary forms, nor for text in either format; a NULL reads as the zero
// value (the journal's columns it reads so are NOT NULL).
type rowValues struct {
	fields []pgconn.FieldDescription
	types  *pgtype.Map
	raw    [][]byte
	// The last string read of each of the first columns, returned again
	// while the column's bytes repeat.
	last [lastTexts]lastText
}

// lastTexts is how many of a row's first columns rowValues keeps the last
// string of.
const lastTexts = 16

type lastText struct {
	s   string
	set bool
}

// newRowValues returns a decoder of rows' rows.
func newRowValues(rows pgx.Rows) rowValues {
	return rowValues{fields: rows.FieldDescriptions(), types: rows.Conn().TypeMap()}
}

// next makes the current row of rows the one the decoder reads; it fails
// when the row has fewer than n columns.
func (v *rowValues) next(rows pgx.Rows, n int) error {
	v.raw = rows.RawValues()
	if len(v.raw) < n || len(v.fields) < n {
		return fmt.Errorf("a row of %d columns, want %d", len(v.raw), n)
	}
	return nil
}

// null reports whether column i of the row is NULL.
func (v *rowValues) null(i int) bool { return v.raw[i] == nil }

func (v *rowValues) binary(i int) bool { return v.fields[i].Format == pgtype.BinaryFormatCode }

// fallback scans column i into dst through the type map.
func (v *rowValues) fallback(i int, dst any) error {
	if err := v.types.Scan(v.fields[i].DataTypeOID, v.fields[i].Format, v.raw[i], dst); err != nil {
		return fmt.Errorf("column %s: %w", v.fields[i].Name, err)
	}
	return nil
}

// int64 returns column i, an integer (0 when NULL).
func (v *rowValues) int64(i int) (int64, error) {
	b := v.raw[i]
	if b == nil {
		return 0, nil
	}
	if v.binary(i) {
		switch v.fields[i].DataTypeOID {
		case pgtype.Int8OID:
			if len(b) == 8 {
				return int64(binary.BigEndian.Uint64(b)), nil
			}
		case pgtype.Int4OID:
			if len(b) == 4 {
				return int64(int32(binary.BigEndian.Uint32(b))), nil
			}
		case pgtype.Int2OID:
			if len(b) == 2 {
				return int64(int16(binary.BigEndian.Uint16(b))), nil
			}
		}
	}
	var n int64
	return n, v.fallback(i, &n)
}

// int32 returns column i, an integer that fits in 32 bits.
func (v *rowValues) int32(i int) (int32, error) {
	n, err := v.int64(i)
	if err == nil && (n < math.MinInt32 || n > math.MaxInt32) {
		err = fmt.Errorf("column %s: %d does not fit in 32 bits", v.fields[i].Name, n)
	}
	return int32(n), err
}

// postgresEpoch is where PostgreSQL's binary timestamps count from, in
// Unix seconds.
const postgresEpoch = 946684800 // 2000-01-01T00:00:00Z

// time returns column i, a timestamp, in UTC (the zero time when NULL).
func (v *rowValues) time(i int) (time.Time, error) {
	b := v.raw[i]
	if b == nil {
		return time.Time{}, nil
	}
	if oid := v.fields[i].DataTypeOID; v.binary(i) && len(b) == 8 && (oid == pgtype.TimestamptzOID || oid == pgtype.TimestampOID) {
		if us := int64(binary.BigEndian.Uint64(b)); us != math.MaxInt64 && us != math.MinInt64 { // not ±infinity
			// Seconds and microseconds apart: the microseconds since 1970
			// of PostgreSQL's latest timestamps overflow an int64.
			return time.Unix(postgresEpoch+us/1e6, us%1e6*1e3).UTC(), nil
		}
	}
	var t time.Time
	err := v.fallback(i, &t)
	return t.UTC(), err
}

// text returns column i, text ("" when NULL). While the column's bytes
// equal the previous row's, it returns the same string.
func (v *rowValues) text(i int) (string, error) {
	b := v.raw[i]
	if b == nil {
		return "", nil
	}
	switch v.fields[i].DataTypeOID {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
		if i >= lastTexts {
			return string(b), nil
		}
		if last := v.last[i]; last.set && last.s == string(b) { // compared without a copy
			return last.s, nil
		}
		s := string(b)
		v.last[i] = lastText{s, true}
		return s, nil
	}
	var s string
	return s, v.fallback(i, &s)
}

// bytes returns a copy of column i, bytea (nil when NULL).
func (v *rowValues) bytes(i int) ([]byte, error) {
	b := v.raw[i]
	if b == nil {
		return nil, nil
	}
	if v.binary(i) && v.fields[i].DataTypeOID == pgtype.ByteaOID {
		return append(make([]byte, 0, len(b)), b...), nil
	}
	var out []byte
	return out, v.fallback(i, &out)
}

// strings returns column i, an array of text (nil when NULL).
func (v *rowValues) strings(i int) ([]string, error) {
	if v.raw[i] == nil {
		return nil, nil
	}
	var out []string
	return out, v.fallback(i, &out)
}
