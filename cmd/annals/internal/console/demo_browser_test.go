package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/demo"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/sqlite"
)

// demoURL is the demo's database as annals demo names it, opened in the
// test's temp folder: the pages show no machine's path.
const demoURL = "sqlite:annals-demo.db"

// demoShots is where TestBrowserDemo saves its screenshots, and the
// prefix of their names: with ANNALS_CONSOLE_DOC_SCREENSHOTS=1, the
// repository's docs/console (the pictures of docs/console.md), as
// overview.png, entities.png, ...; otherwise the folder
// ANNALS_CONSOLE_SCREENSHOTS names (or a temp folder), as
// demo-overview.png, ..., beside TestBrowser's.
func demoShots(t *testing.T) (dir, prefix string) {
	t.Helper()
	if os.Getenv("ANNALS_CONSOLE_DOC_SCREENSHOTS") == "1" {
		// The test runs in the package's folder, four below the root.
		root, err := filepath.Abs("../../../..")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
			t.Fatalf("ANNALS_CONSOLE_DOC_SCREENSHOTS: no repository root at %s: %v", root, err)
		}
		dir = filepath.Join(root, "docs", "console")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir, ""
	}
	dir, err := filepath.Abs(screenshots(t))
	if err != nil {
		t.Fatal(err)
	}
	return dir, "demo-"
}

// demoPayload formats payloads as the annals command's console does:
// JSON indented, others as the tests' formatter shows them.
func demoPayload(id int32, manifest string, p []byte) Payload {
	if id == serialization.JSONID {
		var b bytes.Buffer
		if json.Indent(&b, p, "", "  ") == nil {
			return Payload{Kind: "json", Text: b.String(), Size: len(p)}
		}
	}
	return testPayload(id, manifest, p)
}

// demoLoop runs the demo on st again and again (each run continues the
// last, as annals demo run twice does), a pause between runs, until
// stop. started is closed when the first run has recovered its accounts
// (the file and its schema exist).
type demoLoop struct {
	started chan struct{}
	runs    atomic.Int64
	cancel  context.CancelFunc
	done    chan error
}

func startDemo(st *stores.Store, cfg demo.Config) *demoLoop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &demoLoop{started: make(chan struct{}), cancel: cancel, done: make(chan error, 1)}
	var once sync.Once
	go func() {
		var err error
		defer func() { l.done <- err }()
		for seed := uint64(1); ctx.Err() == nil; seed++ {
			c := cfg
			c.Seed = seed
			c.Report = func(r demo.Report) {
				if _, ok := r.(demo.Started); ok {
					once.Do(func() { close(l.started) })
				}
			}
			if _, err = demo.Run(ctx, st, c); err != nil {
				err = fmt.Errorf("demo run %d: %w", seed, err)
				return
			}
			l.runs.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return l
}

// stop ends the loop after the run in progress (which stops issuing
// operations, then recovers and verifies) and returns its error.
func (l *demoLoop) stop() error {
	l.cancel()
	return <-l.done
}

// TestBrowserDemo runs the annals demo (a bank of accounts whose balance
// read model is kept by four projection instances) on a SQLite file,
// opens the console on that file while the demo writes, as annals demo
// and annals console in two terminals do, and checks in a real Chromium
// what a person sees: the accounts, an account's timeline with its
// payloads, the live tail receiving the demo's events, the balance
// projection's instances and its lag chart, the cluster and the slices.
// It saves a screenshot of each main page.
func TestBrowserDemo(t *testing.T) {
	ctx := browser(t)
	dir, prefix := demoShots(t)
	// The charts need this many samples: a few, or for the docs' pictures
	// some seconds of the demo.
	points := 4
	if prefix == "" {
		points = 40
	}
	t.Chdir(t.TempDir())
	bg := context.Background()

	// The demo, small: eight accounts, forty operations a run.
	mux := stores.New()
	ds, err := mux.Open(bg, demoURL, stores.Create)
	if err != nil {
		t.Fatal(err)
	}
	cfg := demo.Config{Accounts: 8, Ops: 40, Concurrency: 2}
	loop := startDemo(ds, cfg)
	var stopped bool
	stopDemo := func() {
		if stopped {
			return
		}
		stopped = true
		if err := loop.stop(); err != nil {
			t.Errorf("the demo: %v", err)
		}
	}
	t.Cleanup(func() { stopDemo(); _ = ds.Close() })
	select {
	case <-loop.started:
	case err := <-loop.done:
		loop.done <- err
		t.Fatalf("the demo ended before it started: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the demo did not start in a minute")
	}

	// The console opens the file on its own, as annals console does.
	cs, err := mux.Open(bg, demoURL, stores.Existing)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	_, hs := newServer(t, cs, demoURL, func(o *Options) {
		o.FormatPayload = demoPayload
		o.SampleEvery = 250 * time.Millisecond
		o.Samples = 10_000 // none dropped while the test runs: the API's samples extend the page's
	})

	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	eval := func(v any, expr string) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(c, chromedp.Evaluate[string]("JSON.stringify("+expr+")"))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		if err := json.Unmarshal([]byte(s), v); err != nil {
			t.Fatalf("evaluate %s: %v (%s)", expr, err, s)
		}
	}
	text := func(sel string) string {
		t.Helper()
		var s string
		eval(&s, fmt.Sprintf("document.querySelector(%q).innerText", sel))
		return s
	}
	count := func(sel string) int {
		t.Helper()
		var n int
		eval(&n, fmt.Sprintf("document.querySelectorAll(%q).length", sel))
		return n
	}
	wait := func(what, expr string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var last error
		for time.Now().Before(deadline) {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			ok, err := chromedp.Run(c, chromedp.Evaluate[bool]("Boolean("+expr+")"))
			cancel()
			if err == nil && ok {
				return
			}
			last = err
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("waiting for %s (%s): not true after 30s (last error: %v)", what, expr, last)
	}
	// reload loads path until sel has at least n elements.
	reload := func(what, path, visible, sel string, n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			step(what, chromedp.Navigate(hs.URL+path), chromedp.WaitVisible(chromedp.CSS(visible)))
			if count(sel) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: fewer than %d of %s after 60s", what, n, sel)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	// shot saves the whole page, or what the window shows (1280 wide) of
	// a long one, compressed.
	shot := func(name string, whole bool) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		capture := chromedp.CaptureScreenshot()
		if whole {
			capture = chromedp.FullScreenshot(100) // 100: PNG
		}
		raw, err := chromedp.Run(c, capture)
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		var b bytes.Buffer
		if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, prefix+name+".png")
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, b.Len())
	}
	accounts := make([]string, cfg.Accounts)
	for i := range accounts {
		accounts[i] = bank.EntityType + annals.Separator + demo.AccountID(i)
	}
	bankManifests := []string{bank.ManifestDeposited, bank.ManifestWithdrawn}

	// Overview: the store as annals demo names it, its schema version,
	// the accounts' figures, and the events-per-second chart with as many
	// points as its samples.
	reload("overview", "/", "#types", "#rate-chart circle.point", points)
	if got := text("#schema"); got != fmt.Sprintf("%d of %d", sqlite.SchemaVersion, sqlite.SchemaVersion) {
		t.Errorf("overview: schema version %q", got)
	}
	if got := text("#store"); got != "sqlite: "+demoURL {
		t.Errorf("overview: the store %q, want sqlite: %s", got, demoURL)
	}
	// The figures are the store's statistics as of the page's note (kept
	// for 30s): some of the accounts, some events.
	var typeRow []string
	eval(&typeRow, `Array.from(document.querySelectorAll("#types tbody tr")).map(r => r.cells[0].innerText + " " + r.cells[1].innerText + " " + r.cells[2].innerText)`)
	var ids, evs int
	if len(typeRow) != 1 || !func() bool { _, err := fmt.Sscanf(typeRow[0], "Account %d %d", &ids, &evs); return err == nil }() || ids < 1 || ids > cfg.Accounts || evs < 1 {
		t.Errorf("overview: the types table shows %q, want Account with 1 to %d ids and its events", typeRow, cfg.Accounts)
	}
	points = count("#rate-chart circle.point")
	if note := text("#rate-chart + p"); !strings.HasPrefix(note, fmt.Sprintf("%d samples", points)) {
		t.Errorf("overview: the chart has %d points; its note says %q", points, note)
	}
	shot("overview", true)

	// Entities: the bank's accounts, by entity type.
	step("entities",
		chromedp.Navigate(hs.URL+"/entities"),
		chromedp.SendKeys(chromedp.CSS(`input[name="type"]`), bank.EntityType),
		chromedp.Click(chromedp.CSS(`form.search button`)),
	)
	wait("the accounts", `document.location.search.includes("type=Account") && document.querySelector("#ids tbody a") !== null`)
	var listed []string
	eval(&listed, `Array.from(document.querySelectorAll("#ids tbody a")).map(a => a.textContent)`)
	if !slices.Equal(listed, accounts) {
		t.Errorf("entities: Account lists %q, want %q", listed, accounts)
	}
	shot("entities", true)

	// The timeline of the first account: its deposits and withdrawals,
	// each with the payload stored, formatted as annals events shows it.
	step("timeline", chromedp.Click(chromedp.CSS(`#ids tbody a`)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if got := text("#pid"); got != accounts[0] {
		t.Fatalf("timeline: of %q, want %q", got, accounts[0])
	}
	type shown struct {
		Seq      string `json:"seq"`
		Manifest string `json:"manifest"`
		Payload  string `json:"payload"`
	}
	var events []shown
	eval(&events, `Array.from(document.querySelectorAll("#timeline li.event")).map(e => ({seq: e.querySelector(".seq").textContent, manifest: (e.querySelector(".manifest") || {}).textContent || "", payload: e.querySelector(".payload").textContent}))`)
	if len(events) == 0 {
		t.Fatal("timeline: no events")
	}
	stored := map[string]shown{}
	for e, err := range ds.Journal.Replay(bg, accounts[0], 1, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			t.Fatal(err)
		}
		stored["#"+strconv.FormatInt(e.SequenceNr, 10)] = shown{Manifest: e.Manifest, Payload: demoPayload(e.SerializerID, e.Manifest, e.Payload).Text}
	}
	kinds := map[string]int{}
	for i, e := range events {
		if want := fmt.Sprintf("#%d", i+1); e.Seq != want {
			t.Errorf("timeline: event %d is %s, want %s", i, e.Seq, want)
		}
		if !slices.Contains(bankManifests, e.Manifest) || !strings.Contains(e.Payload, `"amount": `) {
			t.Errorf("timeline: %s is %s %q, want a deposit or withdrawal with its amount", e.Seq, e.Manifest, e.Payload)
		}
		if s := stored[e.Seq]; s.Manifest != e.Manifest || s.Payload != e.Payload {
			t.Errorf("timeline: %s shows %s %q; the journal holds %s %q", e.Seq, e.Manifest, e.Payload, s.Manifest, s.Payload)
		}
		kinds[e.Manifest]++
	}
	t.Logf("timeline of %s: %d events %v", accounts[0], len(events), kinds)
	shot("timeline", false)

	// The live tail of the accounts from now: the demo's events arrive as
	// they are written, each the event the journal holds, none written
	// before the tail started.
	before := map[string]int64{}
	for _, id := range accounts {
		h, err := ds.Journal.HighestSequenceNr(bg, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		before[id] = h
	}
	step("tail", chromedp.Navigate(hs.URL+"/tail?by=type&type=Account&slices=0-1023&from=now"))
	wait("the tail to follow", `document.querySelector("#tail-status").dataset.state === "following"`)
	wait("the demo's events", `Number(document.querySelector("#tail-count").textContent) >= 8`)
	var tailed []struct {
		Pid     string `json:"pid"`
		Ser     string `json:"ser"`
		Payload string `json:"payload"`
	}
	eval(&tailed, `Array.from(document.querySelectorAll("#tail .event")).map(e => ({pid: e.querySelector(".pid").textContent, ser: e.querySelector(".ser").textContent, payload: e.querySelector(".payload").textContent}))`)
	for _, e := range tailed {
		id, seqText, _ := strings.Cut(e.Pid, " #")
		seq, err := strconv.ParseInt(seqText, 10, 64)
		if err != nil || !slices.Contains(accounts, id) {
			t.Errorf("tail: an event of %q", e.Pid)
			continue
		}
		if seq <= before[id] {
			t.Errorf("tail: %s was written before the tail started (%s was at %d)", e.Pid, id, before[id])
		}
		var found bool
		for r, err := range ds.Journal.Replay(bg, id, seq, seq, 1) {
			if err != nil {
				t.Fatal(err)
			}
			found = true
			if want := "json " + r.Manifest; e.Ser != want || e.Payload != demoPayload(r.SerializerID, r.Manifest, r.Payload).Text {
				t.Errorf("tail: %s shows %s %q; the journal holds %s %q", e.Pid, e.Ser, e.Payload, want, demoPayload(r.SerializerID, r.Manifest, r.Payload).Text)
			}
		}
		if !found {
			t.Errorf("tail: %s is not in the journal", e.Pid)
		}
	}
	t.Logf("tail: %d events", len(tailed))
	shot("tail", false)

	// Projections: the balance projection's instances that saved an
	// offset (those of the ranges holding accounts: the store keeps
	// nothing of an instance that has handled no event), and the lag
	// chart: one point per sample, each where the sample's lag puts it.
	all, _ := annals.SliceRanges(4)
	var ranges []annals.SliceRange
	for _, r := range all {
		if slices.ContainsFunc(accounts, func(id string) bool { return r.Contains(annals.Slice(id)) }) {
			ranges = append(ranges, r)
		}
	}
	reload("projections", "/projections", "#instances", "#lag-chart circle.point", points)
	var rows [][]string
	eval(&rows, `Array.from(document.querySelectorAll("#instances tbody tr")).map(r => Array.from(r.cells).map(c => c.innerText))`)
	if len(rows) != len(ranges) {
		t.Fatalf("projections: %d instances, want %d (%v): %q", len(rows), len(ranges), ranges, rows)
	}
	for i, r := range ranges {
		// Projection, Key, Offset, Paused, Updated, Slices, Behind, Lag.
		if row := rows[i]; len(row) < 8 || row[0] != bank.BalanceProjectionName || row[1] != r.String() || !strings.HasPrefix(row[2], `{"seq":`) || row[3] != "no" || row[5] != r.String() || row[6] == "?" {
			t.Errorf("projections: row %d is %q, want %s %s at a sequence offset, not paused, its backlog counted", i, row, bank.BalanceProjectionName, r)
		}
	}
	var dots []struct {
		CY    string `json:"cy"`
		Label string `json:"label"`
	}
	eval(&dots, `Array.from(document.querySelectorAll("#lag-chart circle.point")).map(c => ({cy: c.getAttribute("cy"), label: c.querySelector("title").textContent}))`)
	if note := text("#lag-chart + p"); !strings.HasSuffix(note, fmt.Sprintf("; %d samples.", len(dots))) {
		t.Errorf("projections: the lag chart has %d points; its note says %q", len(dots), note)
	}
	var api projectionsData
	getJSON(t, hs.URL+"/api/projections", &api)
	if len(api.Lag) < len(dots) {
		t.Fatalf("projections: the page has %d points, the API %d samples", len(dots), len(api.Lag))
	}
	top := 0.0
	for _, sm := range api.Lag[:len(dots)] {
		top = max(top, *sm.MaxLagSeconds)
	}
	if top == 0 {
		top = 1
	}
	for i, d := range dots {
		sm := api.Lag[i]
		label := fmt.Sprintf("%s: largest lag %s, %d events behind", sm.At.UTC().Format("15:04:05"), seconds(*sm.MaxLagSeconds), *sm.Behind)
		cy := fmt.Sprintf("%.1f", float64(chartH-chartPad)-*sm.MaxLagSeconds/top*float64(chartH-2*chartPad))
		if d.Label != label || d.CY != cy {
			t.Errorf("projections: point %d is %q at y %s; sample %d is %q at y %s", i, d.Label, d.CY, i, label, cy)
		}
	}
	shot("projections", true)

	// Cluster: the demo runs one host, no cluster, and the page says so.
	step("cluster", chromedp.Navigate(hs.URL+"/cluster"), chromedp.WaitVisible(chromedp.CSS("#members")))
	if got := text("#cluster-summary"); got != "0 live member(s) of 0 recorded; live members hold 0 of 1024 slices." {
		t.Errorf("cluster: %q", got)
	}
	if got := text("#cluster-summary + p.note"); got != `no members of cluster "default" are recorded in this store` {
		t.Errorf("cluster: the note %q", got)
	}
	if got := text("#placement tbody"); got != "No daemon instances recorded." {
		t.Errorf("cluster: placement %q", got)
	}
	shot("cluster", true)

	// Slices: the accounts' events in their slices, and the projection's
	// instances' ranges.
	step("slices", chromedp.Navigate(hs.URL+"/slices"), chromedp.WaitVisible(chromedp.CSS("#slice-grid")))
	var cells []string
	eval(&cells, `Array.from(document.querySelectorAll("#slice-grid rect")).map(r => r.querySelector("title").textContent)`)
	if len(cells) != annals.NumberOfSlices {
		t.Fatalf("slices: %d cells", len(cells))
	}
	for _, id := range accounts {
		sl := annals.Slice(id)
		if c := cells[sl]; !strings.HasPrefix(c, fmt.Sprintf("slice %d: ", sl)) || strings.HasPrefix(c, fmt.Sprintf("slice %d: 0 ", sl)) {
			t.Errorf("slices: %s is in slice %d, which shows %q", id, sl, c)
		}
	}
	var spans []string
	eval(&spans, `Array.from(document.querySelectorAll("#bands .projection rect")).map(r => r.querySelector("title").textContent)`)
	if len(spans) != len(ranges) {
		t.Errorf("slices: projection spans %q, want %d", spans, len(ranges))
	}
	shot("slices", true)

	stopDemo()
	t.Logf("the demo ran %d times", loop.runs.Load())
}
