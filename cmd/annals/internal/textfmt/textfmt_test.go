package textfmt

import "testing"

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Num(0), "0"}, {Num(999), "999"}, {Num(1000), "1,000"}, {Num(-1234567), "-1,234,567"},
		{Bytes(512), "512 B"}, {Bytes(1536), "1.5 KiB"}, {Bytes(3 << 20), "3.0 MiB"}, {Bytes(5 << 30), "5.0 GiB"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
