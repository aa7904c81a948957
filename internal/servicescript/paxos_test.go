package servicescript_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/annals-go/annals/internal/servicescript"
)

// paxosRule returns scripts/services' cs_paxos_limit and the source of
// cs_paxos_rebuild with it, to run alone: the rule that decides whether a
// Cassandra node rebuilds its uncommitted-paxos tracker at start.
func paxosRule(t *testing.T) (limit int, src string) {
	t.Helper()
	p, err := servicescript.Path()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	m := regexp.MustCompile(`(?m)^cs_paxos_limit=(\d+)$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("%s: no cs_paxos_limit=N line", p)
	}
	limit, _ = strconv.Atoi(m[1])
	start := strings.Index(script, "\ncs_paxos_rebuild() {\n")
	if start < 0 {
		t.Fatalf("%s: no cs_paxos_rebuild function", p)
	}
	end := strings.Index(script[start:], "\n}\n")
	if end < 0 {
		t.Fatalf("%s: cs_paxos_rebuild has no end", p)
	}
	return limit, m[0] + script[start:start+end+3]
}

// TestCassandraPaxosRebuildRule runs scripts/services' rule on trackers
// of several sizes: a node whose tracker holds more tables' files than
// cs_paxos_limit starts with Cassandra's forced rebuild of it (a node
// after thousands of dropped test keyspaces otherwise took 187 s to start,
// past the script's wait), any other starts as it is.
func TestCassandraPaxosRebuildRule(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	limit, src := paxosRule(t)
	const rebuild = "-Dcassandra.force_paxos_state_rebuild=true"
	cases := []struct {
		name    string
		tables  int // -1: no tracker folder (a first start)
		rebuild bool
	}{
		{"first start", -1, false},
		{"empty tracker", 0, false},
		{"at the limit", limit, false},
		{"past the limit", limit + 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := t.TempDir()
			if c.tables >= 0 {
				dir := filepath.Join(data, "data", "system", "_paxos_repair_state")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for i := range c.tables { // each table's file and its checksum, as Cassandra writes them
					for _, name := range []string{fmt.Sprintf("ks-t%d-id%d-1.paxos", i, i), fmt.Sprintf("ks-t%d-id%d-1.paxos.crc", i, i)} {
						if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			script := "set -euo pipefail\nsay() { :; }\njv_name=cassandra\njv_data=\"$1\"\nextra=(-Dother=1)\n" + src +
				"\ncs_paxos_rebuild\nprintf '%s\\n' \"${extra[@]}\"\n"
			out, err := exec.Command("bash", "-c", script, "bash", data).CombinedOutput()
			if err != nil {
				t.Fatalf("the rule failed: %v\n%s", err, out)
			}
			got := strings.Fields(string(out))
			want := []string{"-Dother=1"}
			if c.rebuild {
				want = append(want, rebuild)
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("JVM options after the rule: %q, want %q", got, want)
			}
		})
	}
}
