package sqlite

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// rowValues reads the columns of one row as the driver returns them
// (readDriver). The first value of a kind its column cannot hold is kept in
// err, and its getters return zero values after it.
type rowValues struct {
	v   []driver.Value
	err error
}

func (r *rowValues) wrong(i int, want string) {
	if r.err == nil {
		r.err = fmt.Errorf("column %d holds %T, not %s", i+1, r.v[i], want)
	}
}

// int reads an INTEGER column.
func (r *rowValues) int(i int) int64 {
	n, ok := r.v[i].(int64)
	if !ok {
		r.wrong(i, "an integer")
	}
	return n
}

// int32 reads an INTEGER column that must fit 32 bits.
func (r *rowValues) int32(i int) int32 {
	n := r.int(i)
	if int64(int32(n)) != n {
		r.wrong(i, "a 32-bit integer")
	}
	return int32(n)
}

// text reads a TEXT column (a blob in it is read as text).
func (r *rowValues) text(i int) string {
	switch v := r.v[i].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	r.wrong(i, "text")
	return ""
}

// nullText reads a TEXT column that may be NULL.
func (r *rowValues) nullText(i int) (string, bool) {
	if r.v[i] == nil {
		return "", false
	}
	return r.text(i), true
}

// blob reads a BLOB column, nil for NULL (text in it is read as bytes).
// The driver's slice is kept, not copied: readDriver's rows own theirs.
func (r *rowValues) blob(i int) []byte {
	switch v := r.v[i].(type) {
	case nil:
		return nil
	case []byte:
		return v
	case string:
		return []byte(v)
	}
	r.wrong(i, "a blob")
	return nil
}

// decodeTags reads a tags column: a JSON array of strings. The form Write
// stores for tags with nothing to escape (["a","b"]) is split without the
// JSON decoder; any other form goes through it.
func decodeTags(s string) ([]string, error) {
	if tags, ok := plainTags(s); ok {
		return tags, nil
	}
	var tags []string
	if err := json.Unmarshal([]byte(s), &tags); err != nil {
		return nil, err
	}
	return tags, nil
}

// plainTags splits ["a","b"] (no spaces, no escapes, no control
// characters, valid UTF-8: what json.Marshal writes for such strings) into
// substrings of s; ok is false for any other form.
func plainTags(s string) (tags []string, ok bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' || !utf8.ValidString(s) {
		return nil, false
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return []string{}, true
	}
	tags = make([]string, 0, strings.Count(body, `","`)+1)
	for {
		if body == "" || body[0] != '"' {
			return nil, false
		}
		end := strings.IndexByte(body[1:], '"') + 1
		if end == 0 {
			return nil, false
		}
		tag := body[1:end]
		for k := 0; k < len(tag); k++ {
			if tag[k] < 0x20 || tag[k] == '\\' {
				return nil, false
			}
		}
		tags = append(tags, tag)
		body = body[end+1:]
		if body == "" {
			return tags, true
		}
		if body[0] != ',' {
			return nil, false
		}
		body = body[1:]
	}
}
