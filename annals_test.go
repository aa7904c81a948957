package annals_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/annals-go/annals"
)

func TestSliceMatchesAkka(t *testing.T) {
	tests := []struct {
		id   string
		want int
	}{
		{"ShoppingCart|cart-1", 392},
		{"Account|a-42", 1017},
		{"p-1", 532},
		{"", 0},
	}
	for _, tt := range tests {
		if got := annals.Slice(tt.id); got != tt.want {
			t.Errorf("Slice(%q) = %d, want %d (Akka's slice for the same id)", tt.id, got, tt.want)
		}
	}
}

func TestSliceUsesUTF16CodeUnits(t *testing.T) {
	// Java's hashCode of "😀" (U+1F600, surrogates D83D DE00) is
	// 0xD83D*31 + 0xDE00 = 1772899, and 1772899 % 1024 = 355.

	if got := annals.Slice("😀"); got != 355 {
		t.Errorf("Slice(😀) = %d, want 355: hash must run over UTF-16 code units", got)
	}
	for _, id := range []string{"é", "Ωmega|x", "a|😀😀😀😀😀😀😀😀😀😀😀"} {
		if s := annals.Slice(id); s < 0 || s >= annals.NumberOfSlices {
			t.Errorf("Slice(%q) = %d, out of range", id, s)
		}
	}
}

func TestEntityType(t *testing.T) {
	tests := map[string]string{
		"Account|a-1":  "Account",
		"Account|a|b":  "Account",
		"no-separator": "no-separator",
		"|leading-sep": "",
	}
	for id, want := range tests {
		if got := annals.EntityType(id); got != want {
			t.Errorf("EntityType(%q) = %q, want %q", id, got, want)
		}
	}
	if got := annals.PersistenceID("Account", "a-1"); got != "Account|a-1" {
		t.Errorf("PersistenceID = %q", got)
	}
}

// TestCheckEntityType: a type whose ids would read as another type, or
// that no store keeps, is refused with the reason.
func TestCheckEntityType(t *testing.T) {
	for _, c := range []struct{ typ, want string }{
		{"Account", ""},
		{"Конто-💰", ""},
		{"", "empty"},
		{"Bank|Account", `separator "|", so its ids would read as type "Bank"`},
		{"A\x00B", "NUL"},
		{"A\xffB", "UTF-8"},
	} {
		err := annals.CheckEntityType(c.typ)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckEntityType(%q) = %v, want nil", c.typ, err)
		case c.want != "" && (!errors.Is(err, annals.ErrInvalidEntityType) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("CheckEntityType(%q) = %v, want ErrInvalidEntityType naming %q", c.typ, err, c.want)
		}
	}
}

func TestSliceRanges(t *testing.T) {
	tests := []struct {
		n     int
		first annals.SliceRange
		last  annals.SliceRange
	}{
		{1, annals.SliceRange{Min: 0, Max: 1023}, annals.SliceRange{Min: 0, Max: 1023}},
		{4, annals.SliceRange{Min: 0, Max: 255}, annals.SliceRange{Min: 768, Max: 1023}},
		{1024, annals.SliceRange{Min: 0, Max: 0}, annals.SliceRange{Min: 1023, Max: 1023}},
	}
	for _, tt := range tests {
		got, err := annals.SliceRanges(tt.n)
		if err != nil {
			t.Fatalf("SliceRanges(%d): %v", tt.n, err)
		}
		if len(got) != tt.n || got[0] != tt.first || got[len(got)-1] != tt.last {
			t.Errorf("SliceRanges(%d) = first %v last %v (len %d), want %v %v", tt.n, got[0], got[len(got)-1], len(got), tt.first, tt.last)
		}
		next := 0
		for _, r := range got {
			if r.Min != next {
				t.Errorf("SliceRanges(%d): range %v does not start at %d; ranges must be contiguous", tt.n, r, next)
			}
			next = r.Max + 1
		}
	}
	for _, n := range []int{0, -1, 3, 1000, 2048} {
		if _, err := annals.SliceRanges(n); !errors.Is(err, annals.ErrInvalidSliceRanges) {
			t.Errorf("SliceRanges(%d) error = %v, want ErrInvalidSliceRanges", n, err)
		}
	}
}
