package otelannals_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/otelannals"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// hookPackages are the packages whose Config.Hooks take hook values.
var hookPackages = []string{"engine", "entity", "projection", "cluster"}

// hookInterfaces parses dir's non-test files and returns its exported
// interfaces named Hook…, each with its method names.
func hookInterfaces(t *testing.T, dir string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !strings.HasPrefix(ts.Name.Name, "Hook") {
				return true
			}
			if it, ok := ts.Type.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					for _, name := range m.Names {
						out[ts.Name.Name] = append(out[ts.Name.Name], name.Name)
					}
				}
			}
			return true
		})
	}
	return out
}

// TestTelemetryImplementsEveryHook: every hook interface of every package
// that takes hooks is asserted in otelannals.go as implemented by
// Telemetry (the compiler checks each assertion), and every hook method
// name is unique across the packages, so that one value can implement
// them all (franz-go's rule for kgo's hooks).
func TestTelemetryImplementsEveryHook(t *testing.T) {
	src, err := os.ReadFile("otelannals.go")
	if err != nil {
		t.Fatal(err)
	}
	asserted := map[string]bool{}
	for _, m := range regexp.MustCompile(`_ (\w+)\.(Hook\w+)\s*= \(\*Telemetry\)\(nil\)`).FindAllStringSubmatch(string(src), -1) {
		asserted[m[1]+"."+m[2]] = true
	}
	methods := map[string]string{}
	for _, pkg := range hookPackages {
		for iface, ms := range hookInterfaces(t, filepath.Join("..", pkg)) {
			name := pkg + "." + iface
			if !asserted[name] {
				t.Errorf("otelannals.Telemetry does not assert %s (add `_ %s = (*Telemetry)(nil)` and implement it)", name, name)
			}
			for _, m := range ms {
				if other, ok := methods[m]; ok {
					t.Errorf("hook method %s is declared by both %s and %s: one value cannot implement both", m, other, name)
				}
				methods[m] = name
			}
		}
	}
	if len(methods) < 20 {
		t.Errorf("found %d hook methods in %v: the parse found too few", len(methods), hookPackages)
	}
}

// TestValuesThatAreNoHookAreRefused: every configuration that takes hooks
// refuses a value implementing none of its package's hook interfaces,
// naming the field, and takes the telemetry.
func TestValuesThatAreNoHookAreRefused(t *testing.T) {
	tel, err := otelannals.New(sdkmetric.NewMeterProvider(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	st := memory.New()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	build := map[string]func(hooks []any) error{
		"engine": func(hooks []any) error {
			f, err := engine.NewFront(st.Journal(), engine.Config{Hooks: hooks})
			if err == nil {
				_ = f.Close()
			}
			return err
		},
		"entity": func(hooks []any) error {
			h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: st.Journal(), Registry: reg, Hooks: hooks})
			if err == nil {
				_ = h.Shutdown(context.Background())
			}
			return err
		},
		"projection": func(hooks []any) error {
			_, err := projection.AtLeastOnce(projection.ID{Name: "p"}, projection.BySlices(st.Queries(), "Account", annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1}), st.Projections(),
				func(context.Context, query.Envelope) error { return nil }, projection.Config{Hooks: hooks})
			return err
		},
		"cluster": func(hooks []any) error {
			m, err := cluster.Join(t.Context(), cluster.Config{Store: st.Membership(), Name: "m", LeaseTime: 2 * time.Second, Ranges: 1, Hooks: hooks})
			if err == nil {
				_ = m.Leave(context.Background())
			}
			return err
		},
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range build {
			if !yield(k) {
				return
			}
		}
	})
	for _, pkg := range names {
		if err := build[pkg]([]any{tel}); err != nil {
			t.Errorf("%s with the telemetry as hook: %v", pkg, err)
		}
		err := build[pkg]([]any{tel, "not a hook"})
		if err == nil || !strings.Contains(err.Error(), "Hooks[1] (string) implements no hook interface") {
			t.Errorf("%s with a string as hook: %v, want a refusal naming Hooks[1]", pkg, err)
		}
	}
}
