package servicescript_test

import (
	"os"
	"testing"

	"github.com/annals-go/annals/internal/servicescript"
)

func TestPathIsTheScript(t *testing.T) {
	p, err := servicescript.Path()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("scripts/services at %s: %v", p, err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Errorf("%s is not an executable file (mode %v)", p, fi.Mode())
	}
}
