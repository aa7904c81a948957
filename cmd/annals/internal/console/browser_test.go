package console

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/annals-go/annals/serialization"
)

// chromium returns the path of a Chromium (or Chrome) binary:
// ANNALS_TEST_CHROMIUM, else the first of chromium, chromium-browser,
// google-chrome on PATH. Without one the test skips, or fails when
// ANNALS_TEST_REQUIRE lists chromium (as CI sets it).
func chromium(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("ANNALS_TEST_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	required := slices.Contains(strings.FieldsFunc(os.Getenv("ANNALS_TEST_REQUIRE"), func(r rune) bool { return r == ',' || r == ' ' }), "chromium")
	msg := "no Chromium installed (looked for $ANNALS_TEST_CHROMIUM, chromium, chromium-browser, google-chrome): run scripts/install-chromium (Debian's chromium and chromium-driver)"
	if required {
		t.Fatalf("%s; ANNALS_TEST_REQUIRE lists chromium", msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium and returns a context for its tab.
// The flags keep it from reaching the network on its own.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser without a timeout: a timeout on the first run
	// would end the browser.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// screenshots is where the browser test saves its screenshots: the
// folder ANNALS_CONSOLE_SCREENSHOTS names, else the test's temp folder.
func screenshots(t *testing.T) string {
	if d := os.Getenv("ANNALS_CONSOLE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestBrowser loads each page in a real headless Chromium against a store
// with known data and checks what a person sees, saving a screenshot of
// each page.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	url := "sqlite:" + filepath.Join(t.TempDir(), "browser.db")
	s := openStore(t, url)
	_, hs := newServer(t, s, url, func(o *Options) { o.AllowWrites = true })
	dir := screenshots(t)

	// step runs actions with a bound and names the failure.
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		v, err := chromedp.Run(c, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	count := func(sel string) int {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := chromedp.Run(c, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	// wait evaluates expr until it is true; errors of a page that is
	// navigating away count as not yet.
	wait := func(what, expr string) {
		t.Helper()
		deadline := time.Now().Add(25 * time.Second)
		var last error
		for time.Now().Before(deadline) {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			ok, err := chromedp.Run(c, chromedp.Evaluate[bool]("Boolean("+expr+")"))
			cancel()
			if err == nil && ok {
				return
			}
			last = err
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("waiting for %s (%s): not true after 25s (last error: %v)", what, expr, last)
	}
	shot := func(name string) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(dir, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}

	// Overview: the entity types and the events-per-second chart, with
	// as many points as the samples the page says it has.
	wait0 := time.Now()
	for {
		step("overview", chromedp.Navigate(hs.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#types")))
		if count("#rate-chart circle.point") >= 3 {
			break
		}
		if time.Since(wait0) > 20*time.Second {
			t.Fatal("overview: no chart after 20s")
		}
		time.Sleep(300 * time.Millisecond)
	}
	if got := eval(`document.querySelector("#types").innerText`); !strings.Contains(got, "Account") || !strings.Contains(got, "Order") {
		t.Errorf("overview: the types table shows %q", got)
	}
	points := count("#rate-chart circle.point")
	if note := eval(`document.querySelector("#rate-chart").nextElementSibling.innerText`); !strings.HasPrefix(note, fmt.Sprintf("%d samples", points)) {
		t.Errorf("overview: the chart has %d points; its note says %q", points, note)
	}
	shot("overview")

	// Entities: search by type and prefix, as a person types it.
	step("entities",
		chromedp.Navigate(hs.URL+"/entities"),
		chromedp.SendKeys(chromedp.CSS(`input[name="type"]`), "Account"),
		chromedp.SendKeys(chromedp.CSS(`input[name="prefix"]`), "a-"),
		chromedp.Click(chromedp.CSS(`form.search button`)),
	)
	wait("the ids found", `document.location.search.includes("prefix=a-") && document.querySelector("#ids tbody").innerText.includes("Account|a-3")`)
	if got := eval(`document.querySelector("#ids tbody").innerText`); strings.Contains(got, "many") || strings.Contains(got, "Order") {
		t.Errorf("entities: prefix a- of Account shows %q", got)
	}
	shot("entities")

	// The timeline: the payload with a script tag shown as text, the
	// snapshot marked, and no script run from it.
	step("timeline", chromedp.Navigate(hs.URL+"/entity?id=Account%7Ca-1"), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if got := eval(`document.querySelector("#seq-2 .payload").textContent`); got != scriptPayload {
		t.Errorf("timeline: event 2's payload shows %q, want %q", got, scriptPayload)
	}
	if got := eval(`String(document.querySelectorAll("#timeline script").length) + " " + String(document.querySelectorAll("#snapshot-2").length)`); got != "0 1" {
		t.Errorf("timeline: scripts in the timeline, snapshots marked at 2: %s, want 0 1", got)
	}
	if got := eval(`document.querySelector("#seq-2 .meta").innerText`); !strings.Contains(got, "Deposited") || !strings.Contains(got, "bank") || !strings.Contains(got, "#2") {
		t.Errorf("timeline: event 2's line shows %q", got)
	}
	shot("timeline")
	step("deleted", chromedp.Navigate(hs.URL+"/entity?id=Account%7Ca-3"), chromedp.WaitVisible(chromedp.CSS("#deleted")))
	if got := eval(`document.querySelector("#deleted").innerText`); got != "events 1 to 2 were deleted" {
		t.Errorf("timeline of a-3: %q", got)
	}
	step("long", chromedp.Navigate(hs.URL+"/entity?id=Account%7Cmany"), chromedp.WaitVisible(chromedp.CSS("#next")))
	if got := eval(`String(document.querySelectorAll("#timeline li.event").length)`); got != "100" {
		t.Errorf("the long id's first page shows %s events, want 100", got)
	}

	// The live tail: an event written during the test appears; paused,
	// the next one waits until it resumes.
	step("tail", chromedp.Navigate(hs.URL+"/tail?by=type&type=Account&slices=0-1023&from=now"))
	wait("the tail to follow", `document.querySelector("#tail-status").dataset.state === "following"`)
	h, _ := s.Journal.HighestSequenceNr(ctx, "Account|a-2", 0)
	write(t, s, repr("Account|a-2", h+1, []byte(`{"live":"first <i>one</i>"}`), serialization.JSONID, "Live", "bank"))
	wait("the event written", `document.querySelector("#tail-count").textContent === "1" && document.querySelector("#tail .payload").textContent.includes("first <i>one</i>")`)
	shot("tail")
	step("pause", chromedp.Click(chromedp.CSS("#pause")))
	wait("paused", `document.querySelector("#tail-status").dataset.state === "paused"`)
	write(t, s, repr("Account|a-2", h+2, []byte(`{"live":"second"}`), serialization.JSONID, "Live", "bank"))
	time.Sleep(time.Second)
	if got := eval(`document.querySelector("#tail-count").textContent`); got != "1" {
		t.Errorf("paused, the tail shows %s events, want 1", got)
	}
	step("resume", chromedp.Click(chromedp.CSS("#pause")))
	wait("the event written while paused", `document.querySelector("#tail-count").textContent === "2" && document.querySelector("#tail .payload").textContent.includes("second")`)

	// Projections: the lag chart with a point per sample, and a pause
	// confirmed on its own page.
	wait1 := time.Now()
	for {
		step("projections", chromedp.Navigate(hs.URL+"/projections"), chromedp.WaitVisible(chromedp.CSS("#instances")))
		if count("#lag-chart circle.point") >= 3 {
			break
		}
		if time.Since(wait1) > 20*time.Second {
			t.Fatal("projections: no lag chart after 20s")
		}
		time.Sleep(300 * time.Millisecond)
	}
	points = count("#lag-chart circle.point")
	if note := eval(`document.querySelector("#lag-chart").nextElementSibling.innerText`); !strings.Contains(note, fmt.Sprintf("; %d samples", points)) {
		t.Errorf("projections: the lag chart has %d points; its note says %q", points, note)
	}
	if got := eval(`document.querySelector("#instances tbody tr").innerText`); !strings.Contains(got, "balances") || !strings.Contains(got, "0-511") {
		t.Errorf("projections: first row %q", got)
	}
	shot("projections")
	step("pause projection", chromedp.Click(chromedp.CSS(`#instances tbody tr:first-child form[action="/projections/pause"] button`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	shot("confirm")
	step("confirm", chromedp.Click(chromedp.CSS("#confirm-yes")), chromedp.WaitVisible(chromedp.CSS("#done")))
	if got := eval(`document.querySelector("#done").innerText + " | " + document.querySelector("#instances tbody tr:first-child").innerText`); !strings.Contains(got, "paused balances/0-511") || !strings.Contains(got, "paused") {
		t.Errorf("after confirming: %q", got)
	}

	// Cluster and slices.
	step("cluster", chromedp.Navigate(hs.URL+"/cluster"), chromedp.WaitVisible(chromedp.CSS("#members")))
	if got := eval(`document.querySelector("#members").innerText + " | " + document.querySelector("#placement").innerText`); !strings.Contains(got, "node-1") || !strings.Contains(got, "0-511") || !strings.Contains(got, "balances") {
		t.Errorf("cluster: %q", got)
	}
	shot("cluster")
	step("slices", chromedp.Navigate(hs.URL+"/slices"), chromedp.WaitVisible(chromedp.CSS("#slice-grid")))
	if got := eval(`String(document.querySelectorAll("#slice-grid rect").length) + " " + String(document.querySelectorAll("#bands .projection rect").length) + " " + String(document.querySelectorAll("#bands .member rect").length)`); got != "1024 2 1" {
		t.Errorf("slices: cells, projection spans, member spans: %s, want 1024 2 1", got)
	}
	shot("slices")
}
