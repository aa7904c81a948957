package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
)

func get(t *testing.T, c *http.Client, u string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	code, body, h := get(t, nil, u)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, code, body)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q", u, ct)
	}
	reflect.ValueOf(v).Elem().SetZero()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", u, err, body)
	}
}

// TestPages loads every page and API answer on each store and checks what
// they show of the known data.
func TestPages(t *testing.T) {
	for _, ts := range testStores(t, true) {
		t.Run(ts.name, func(t *testing.T) {
			url := ts.url(t)
			s := openStore(t, url)
			_, hs := newServer(t, s, url, nil)
			base := hs.URL

			// Overview: figures of both entity types.
			code, body, h := get(t, nil, base+"/")
			if code != 200 || !strings.Contains(h.Get("Content-Type"), "text/html") {
				t.Fatalf("overview: %d %s", code, h.Get("Content-Type"))
			}
			for _, want := range []string{"Account", "Order", "Events per second", `id="types"`} {
				if !strings.Contains(body, want) {
					t.Errorf("overview lacks %q", want)
				}
			}
			var ov struct {
				Store  struct{ Kind string } `json:"store"`
				Schema struct {
					Current int    `json:"current"`
					Latest  int    `json:"latest"`
					Known   bool   `json:"known"`
					Note    string `json:"note"`
				} `json:"schema"`
				Stats *struct {
					Types []struct {
						EntityType string `json:"entity_type"`
						Events     int64  `json:"events"`
						IDs        int64  `json:"persistence_ids"`
					} `json:"entity_types"`
					Total    struct{ Events int64 } `json:"total"`
					Estimate bool                   `json:"estimate"`
					Source   string                 `json:"source"`
				} `json:"stats"`
				StatsError string `json:"stats_error"`
				Rate       struct {
					Samples []json.RawMessage `json:"samples"`
				} `json:"rate"`
			}
			getJSON(t, base+"/api/overview", &ov)
			if ov.Stats == nil {
				t.Fatalf("overview: no figures: %s", ov.StatsError)
			}
			// The schema version, read through the migrator of the URL's
			// scheme (the server is given no Options.SchemaVersion).
			wantSchema := map[string]string{"memory": "true 0 0 this store has no versioned schema",
				"sqlite": fmt.Sprintf("true %d %d ", sqlite.SchemaVersion, sqlite.SchemaVersion), "postgres": fmt.Sprintf("true %d %d ", postgres.SchemaVersion, postgres.SchemaVersion),
				"postgres-r2dbc": "true 1 1 "}[ts.name]
			if got := fmt.Sprintf("%v %d %d %s", ov.Schema.Known, ov.Schema.Current, ov.Schema.Latest, ov.Schema.Note); got != wantSchema {
				t.Errorf("overview: schema %q, want %q", got, wantSchema)
			}
			// 3 + 1 + 1 (a-3 after deleting 2) + 250 Account events, 1 Order.
			if want := int64(3 + 1 + 1 + manyEvents + 1); ov.Stats.Total.Events != want {
				t.Errorf("overview: %d events, want %d (%s)", ov.Stats.Total.Events, want, ov.Stats.Source)
			}
			if len(ov.Stats.Types) != 2 || ov.Stats.Types[0].EntityType != "Account" || ov.Stats.Types[0].IDs != 4 {
				t.Errorf("overview: types %+v", ov.Stats.Types)
			}

			// Entities: by type and prefix.
			var ids struct {
				IDs []struct {
					ID      string `json:"persistence_id"`
					Highest int64  `json:"highest_sequence_nr"`
				} `json:"ids"`
				NextAfter string `json:"next_after"`
			}
			getJSON(t, base+"/api/ids?type=Account&prefix=a-", &ids)
			if got := fmt.Sprint(ids.IDs); got != "[{Account|a-1 3} {Account|a-2 1} {Account|a-3 3}]" {
				t.Errorf("ids of Account with prefix a-: %s", got)
			}
			getJSON(t, base+"/api/ids?type=Account&limit=2", &ids)
			if len(ids.IDs) != 2 || ids.NextAfter != "Account|a-2" {
				t.Errorf("ids page of 2: %+v", ids)
			}
			code, body, _ = get(t, nil, base+"/entities?type=Account&prefix=a-")
			if code != 200 || !strings.Contains(body, `href="/entity?id=Account%7ca-1"`) && !strings.Contains(body, `href="/entity?id=Account%7Ca-1"`) {
				t.Errorf("entities page: %d, no link to Account|a-1:\n%s", code, body)
			}

			// One id's timeline: payloads, the snapshot marked, escaped.
			code, body, _ = get(t, nil, base+"/entity?id="+urlQuery("Account|a-1"))
			if code != 200 {
				t.Fatalf("entity: %d %s", code, body)
			}
			if strings.Contains(body, "<script>alert") {
				t.Errorf("entity page: the payload's script tag is not escaped")
			}
			if !strings.Contains(body, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;") {
				t.Errorf("entity page: the escaped payload is missing:\n%s", body)
			}
			if !strings.Contains(body, `id="snapshot-2"`) {
				t.Errorf("entity page: the snapshot at 2 is not marked")
			}
			var ent struct {
				Events []struct {
					Seq      int64    `json:"sequence_nr"`
					Tags     []string `json:"tags"`
					Manifest string   `json:"manifest"`
					Payload  Payload  `json:"payload"`
					Snapshot *struct {
						Seq int64 `json:"sequence_nr"`
					} `json:"snapshot"`
				} `json:"events"`
				Deleted string `json:"deleted"`
				Next    int64  `json:"next"`
			}
			getJSON(t, base+"/api/entity?id="+urlQuery("Account|a-1"), &ent)
			if len(ent.Events) != 3 || ent.Events[1].Payload.Text != scriptPayload || ent.Events[1].Manifest != "Deposited" ||
				fmt.Sprint(ent.Events[0].Tags) != "[bank]" || ent.Events[1].Snapshot == nil || ent.Events[1].Snapshot.Seq != 2 {
				t.Errorf("entity Account|a-1: %+v", ent)
			}
			getJSON(t, base+"/api/entity?id="+urlQuery("Account|a-2"), &ent)
			if len(ent.Events) != 1 || ent.Events[0].Payload.Text != "0x0a03666f6f1001" {
				t.Errorf("entity Account|a-2 (protobuf): %+v", ent)
			}
			getJSON(t, base+"/api/entity?id="+urlQuery("Account|a-3"), &ent)
			if len(ent.Events) != 1 || ent.Events[0].Seq != 3 || ent.Deleted != "events 1 to 2 were deleted" {
				t.Errorf("entity Account|a-3 (deleted to 2): %+v", ent)
			}
			// A long id opens its first page, bounded, with a link on.
			getJSON(t, base+"/api/entity?id="+urlQuery(manyID), &ent)
			if len(ent.Events) != 100 || ent.Events[99].Seq != 100 || ent.Next != 101 {
				t.Errorf("entity %s: %d events, next %d", manyID, len(ent.Events), ent.Next)
			}
			getJSON(t, base+"/api/entity?id="+urlQuery(manyID)+"&from=201", &ent)
			if len(ent.Events) != 50 || ent.Events[0].Seq != 201 || ent.Next != 0 {
				t.Errorf("entity %s from 201: %d events, next %d", manyID, len(ent.Events), ent.Next)
			}
			if s.Durable != nil {
				var st struct {
					State *struct {
						Revision int64   `json:"revision"`
						Payload  Payload `json:"payload"`
					} `json:"durable_state"`
				}
				getJSON(t, base+"/api/entity?id="+urlQuery("Profile|p-1"), &st)
				if st.State == nil || st.State.Revision != 1 || st.State.Payload.Text != `{"name":"Ada"}` {
					t.Errorf("durable state of Profile|p-1: %+v", st.State)
				}
			}
			if code, _, _ := get(t, nil, base+"/api/entity"); code != http.StatusBadRequest {
				t.Errorf("entity without id: %d, want 400", code)
			}

			// Projections: both instances, nothing behind yet.
			var pr struct {
				Instances []struct {
					Name, Key string
					Pending   *int64 `json:"pending_events"`
				} `json:"instances"`
			}
			if s.Admin == nil { // memory: offsets kept, not listed
				if code, body, _ := get(t, nil, base+"/api/projections"); code != http.StatusNotImplemented || !strings.Contains(body, "cannot list them") {
					t.Errorf("projections on memory: %d %s, want 501 saying why", code, body)
				}
			} else if getJSON(t, base+"/api/projections", &pr); len(pr.Instances) != 2 || pr.Instances[0].Key != "0-511" || pr.Instances[0].Pending == nil || *pr.Instances[0].Pending != 0 {
				t.Errorf("projections: %+v", pr.Instances)
			}

			// Cluster: the member, its range and the daemon instance.
			var cl struct {
				Status struct {
					Members []struct {
						Name   string
						Live   bool
						Ranges []struct{ Min, Max int }
					} `json:"members"`
				} `json:"status"`
				Placement []placement `json:"placement"`
			}
			getJSON(t, base+"/api/cluster", &cl)
			if len(cl.Status.Members) != 1 || !cl.Status.Members[0].Live || fmt.Sprint(cl.Status.Members[0].Ranges) != "[{0 511}]" ||
				len(cl.Placement) != 1 || cl.Placement[0].Daemon != "balances" || cl.Placement[0].Member != "node-1" {
				t.Errorf("cluster: %+v", cl)
			}
			code, body, _ = get(t, nil, base+"/cluster")
			if code != 200 || !strings.Contains(body, "node-1") || !strings.Contains(body, "0-511") {
				t.Errorf("cluster page: %d", code)
			}

			// Slices: every event counted in its slice.
			var sl struct {
				Events *struct {
					Counts []int64 `json:"events"`
				} `json:"events_per_slice"`
				Projections []bandRow `json:"projections"`
				Members     []bandRow `json:"members"`
			}
			getJSON(t, base+"/api/slices", &sl)
			if sl.Events == nil || len(sl.Events.Counts) != 1024 {
				t.Fatalf("slices: %+v", sl)
			}
			var sum int64
			for _, c := range sl.Events.Counts {
				sum += c
			}
			if sum != ov.Stats.Total.Events {
				t.Errorf("slices: %d events counted, the overview says %d", sum, ov.Stats.Total.Events)
			}
			if wantP := map[bool]int{true: 0, false: 1}[s.Admin == nil]; len(sl.Projections) != wantP || wantP == 1 && len(sl.Projections[0].Spans) != 2 || len(sl.Members) != 1 {
				t.Errorf("slices: bands %+v %+v", sl.Projections, sl.Members)
			}
			code, body, _ = get(t, nil, base+"/slices")
			if code != 200 || strings.Count(body, "<rect x=") < 1024 {
				t.Errorf("slices page: %d, %d cells", code, strings.Count(body, "<rect x="))
			}

			// The tail page, and the other pages, answer.
			for _, p := range []string{"/tail", "/tail?by=type&type=Account", "/tail?by=tag&tag=bank", "/projections", "/static/console.css", "/static/console.js"} {
				want := 200
				if p == "/projections" && s.Admin == nil {
					want = http.StatusNotImplemented
				}
				if code, body, _ := get(t, nil, base+p); code != want {
					t.Errorf("%s: %d %s", p, code, body)
				}
			}
			if code, _, _ := get(t, nil, base+"/tail?by=type&type=Account&slices=9-2"); code != http.StatusBadRequest {
				t.Errorf("tail with slices 9-2: %d, want 400", code)
			}
			if code, _, _ := get(t, nil, base+"/nowhere"); code != http.StatusNotFound {
				t.Errorf("/nowhere: %d, want 404", code)
			}
		})
	}
}

func urlQuery(s string) string { return url.QueryEscape(s) }

// TestAuth: a console with a token refuses requests without it; the
// ?token= link sets a cookie; a console on loopback refuses other Host
// names.
func TestAuth(t *testing.T) {
	s := openStore(t, "memory:")
	_, hs := newServer(t, s, "memory:", func(o *Options) { o.Token = "s3cret"; o.LoopbackHosts = true })
	if code, _, h := get(t, nil, hs.URL+"/"); code != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d, want 401 with WWW-Authenticate", code)
	}
	if code, _, _ := get(t, nil, hs.URL+"/api/overview", "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code, _, _ := get(t, nil, hs.URL+"/api/tail?by=type&type=Account"); code != http.StatusUnauthorized {
		t.Errorf("tail without token: %d, want 401", code)
	}
	if code, _, _ := get(t, nil, hs.URL+"/api/overview", "Authorization", "Bearer s3cret"); code != http.StatusOK {
		t.Errorf("bearer token: %d, want 200", code)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(hs.URL + "/entities?type=Account&token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/entities?type=Account" || len(resp.Cookies()) != 1 {
		t.Fatalf("?token=: %d, Location %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	c := resp.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict", c)
	}
	if code, _, _ := get(t, nil, hs.URL+"/entities", "Cookie", c.Name+"="+c.Value); code != http.StatusOK {
		t.Errorf("with the cookie: %d, want 200", code)
	}
	if code, _, _ := get(t, nil, hs.URL+"/?token=nope"); code != http.StatusUnauthorized {
		t.Errorf("?token=nope: %d, want 401", code)
	}
	if code, _, _ := get(t, nil, hs.URL+"/", "Authorization", "Bearer s3cret", "Host", "console.example.com"); code != http.StatusMisdirectedRequest {
		t.Errorf("Host console.example.com on a loopback console: %d, want 421", code)
	}
	_, hs2 := newServer(t, s, "memory:", nil)
	code, _, h := get(t, nil, hs2.URL+"/")
	if code != http.StatusOK {
		t.Errorf("no token set: %d, want 200", code)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers: CSP %q", csp)
	}
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "localhost:1": true, "[::1]:80": true, ":8080": false, "0.0.0.0:8080": false, "10.0.0.1:80": false} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestRedacted: the store URL's password reaches no page.
func TestRedacted(t *testing.T) {
	s := openStore(t, "memory:")
	_, hs := newServer(t, s, "postgres://app:hunter2@db.example/app", nil)
	for _, p := range []string{"/", "/api/overview", "/entities", "/projections"} {
		_, body, _ := get(t, nil, hs.URL+p)
		if strings.Contains(body, "hunter2") {
			t.Errorf("%s shows the password", p)
		}
		if p == "/" && !strings.Contains(body, "postgres://app:xxxxx@db.example/app") {
			t.Errorf("%s lacks the redacted URL", p)
		}
		// The URL is not the open store's: its migrator is not asked.
		if p == "/" && !strings.Contains(body, "this store does not report a schema version") {
			t.Errorf("%s asks a store the URL names that is not the one open", p)
		}
	}
}

// TestWrites: the projection actions are refused on a read-only console,
// without the form token, and ask before they change anything.
func TestWrites(t *testing.T) {
	for _, ts := range testStores(t, false)[1:] { // SQLite: memory keeps no projection list
		t.Run(ts.name, func(t *testing.T) {
			storeURL := ts.url(t)
			s := openStore(t, storeURL)
			id := offsets.ID{Name: "balances", Key: "0-511"}
			paused := func() bool {
				st, err := s.Offsets.Load(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				return st.Paused
			}
			noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			post := func(base, action string, form url.Values, origin string) (int, string, string) {
				req, _ := http.NewRequest(http.MethodPost, base+"/projections/"+action, strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				if origin != "" {
					req.Header.Set("Origin", origin)
				}
				resp, err := noRedirect.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), resp.Header.Get("Location")
			}
			_, ro := newServer(t, s, storeURL, nil)
			_, body, _ := get(t, nil, ro.URL+"/projections")
			if strings.Contains(body, `action="/projections/pause"`) {
				t.Errorf("a read-only console shows the pause form")
			}
			if code, body, _ := post(ro.URL, "pause", url.Values{"name": {id.Name}, "key": {id.Key}, "confirm": {"yes"}}, ""); code != http.StatusForbidden || !strings.Contains(body, "--allow-writes") {
				t.Errorf("pause on a read-only console: %d %s", code, body)
			}
			srv, rw := newServer(t, s, storeURL, func(o *Options) { o.AllowWrites = true })
			_, body, _ = get(t, nil, rw.URL+"/projections")
			if !strings.Contains(body, `action="/projections/pause"`) || !strings.Contains(body, srv.csrf) {
				t.Errorf("the console with writes shows no pause form with its token")
			}
			form := url.Values{"name": {id.Name}, "key": {id.Key}}
			if code, _, _ := post(rw.URL, "pause", form, ""); code != http.StatusForbidden {
				t.Errorf("pause without the form token: %d, want 403", code)
			}
			form.Set("csrf", srv.csrf)
			if code, _, _ := post(rw.URL, "pause", form, "http://evil.example"); code != http.StatusForbidden {
				t.Errorf("pause from another origin: %d, want 403", code)
			}
			code, body, _ := post(rw.URL, "pause", form, "")
			if code != http.StatusOK || !strings.Contains(body, `id="confirm"`) || paused() {
				t.Fatalf("pause without confirm: %d, paused %v: want the confirmation page and nothing changed", code, paused())
			}
			form.Set("confirm", "yes")
			code, _, loc := post(rw.URL, "pause", form, rw.URL)
			if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/projections?done=") || !paused() {
				t.Fatalf("pause confirmed: %d %q, paused %v", code, loc, paused())
			}
			_, body, _ = get(t, nil, rw.URL+loc)
			if !strings.Contains(body, "paused balances/0-511") || !strings.Contains(body, `class="paused"`) {
				t.Errorf("after pausing, the page does not say so")
			}
			if code, _, _ := post(rw.URL, "resume", form, ""); code != http.StatusSeeOther || paused() {
				t.Errorf("resume: %d, paused %v", code, paused())
			}
			if code, _, _ := post(rw.URL, "reset", form, ""); code != http.StatusSeeOther {
				t.Errorf("reset: %d", code)
			}
			if st, _ := s.Offsets.Load(context.Background(), id); st.Offset.Kind != 0 {
				t.Errorf("after reset the offset is %v", st.Offset)
			}
			if code, _, _ := post(rw.URL, "drop", form, ""); code != http.StatusNotFound {
				t.Errorf("unknown action: %d, want 404", code)
			}
		})
	}
}

// TestTailStream: the live tail sends "start", then an event written
// after it, with its payload escaped in JSON.
func TestTailStream(t *testing.T) {
	for _, ts := range testStores(t, true) {
		t.Run(ts.name, func(t *testing.T) {
			url := ts.url(t)
			s := openStore(t, url)
			_, hs := newServer(t, s, url, nil)
			for _, q := range []string{"by=type&type=Account&slices=0-1023", "by=tag&tag=bank", "by=id&id=" + urlQuery("Account|a-1")} {
				t.Run(q, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/api/tail?"+q, nil)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
						b, _ := io.ReadAll(resp.Body)
						t.Fatalf("tail: %d %s", resp.StatusCode, b)
					}
					events := readSSE(resp.Body)
					first := <-events
					if first.name != "start" {
						t.Fatalf("first message %+v, want start", first)
					}
					h, _ := s.Journal.HighestSequenceNr(ctx, "Account|a-1", 0)
					e := repr("Account|a-1", h+1, []byte(`{"live":"<b>now</b>"}`), serialization.JSONID, "Live", "bank")
					write(t, s, e)
					select {
					case m := <-events:
						var ev tailEvent
						if m.name != "event" || json.Unmarshal([]byte(m.data), &ev) != nil || ev.SequenceNr != h+1 || ev.Payload.Text != `{"live":"<b>now</b>"}` || m.id == "" {
							t.Fatalf("tail sent %+v, want the event written (seq %d)", m, h+1)
						}
					case <-ctx.Done():
						t.Fatal("the event written was not sent")
					}
				})
			}
		})
	}
}

type sseMessage struct{ name, id, data string }

func readSSE(r io.Reader) <-chan sseMessage {
	out := make(chan sseMessage, 16)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.name != "" {
					out <- m
				}
				m = sseMessage{}
			case strings.HasPrefix(line, "event: "):
				m.name = line[7:]
			case strings.HasPrefix(line, "id: "):
				m.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				m.data = line[6:]
			}
		}
	}()
	return out
}

// TestCharts: the sampler fills the rate chart, one point per sample.
func TestCharts(t *testing.T) {
	url := "sqlite:" + t.TempDir() + "/c.db"
	s := openStore(t, url)
	_, hs := newServer(t, s, url, nil)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ov struct {
			Rate struct {
				Samples []sample `json:"samples"`
			} `json:"rate"`
		}
		getJSON(t, hs.URL+"/api/overview", &ov)
		if n := len(ov.Rate.Samples); n >= 3 {
			_, body, _ := get(t, nil, hs.URL+"/")
			if got := len(regexp.MustCompile(`<circle class="point"`).FindAllString(body, -1)); got < n {
				t.Errorf("the chart has %d points, the API %d samples", got, n)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no samples after 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPagesCassandraKafka: every page answers on Cassandra and on the
// Kafka journal (with PostgreSQL as its eventual store, no replicator
// running): 200, or 501 saying what the store does not offer, never a
// failure; one id's timeline shows its events.
func TestPagesCassandraKafka(t *testing.T) {
	kinds := []testStore{
		{"cassandra", func(t *testing.T) string { u, _ := cassandratest.URL(t); return u }},
		{"kafka", func(t *testing.T) string {
			brokers := kafkatest.Real(t)
			dsn, _ := pgtest.Schema(t)
			return "kafka://" + brokers[0] + "/?topic_prefix=" + kafkatest.Prefix(t, brokers, "console") + "&eventual=" + dsn
		}},
	}
	for _, ts := range kinds {
		t.Run(ts.name, func(t *testing.T) {
			url := ts.url(t)
			s := openStore(t, url)
			_, hs := newServer(t, s, url, nil)
			for _, p := range []string{"/", "/api/overview", "/entities?type=Account", "/api/ids?type=Account", "/entity?id=Account%7Ca-1",
				"/tail", "/tail?by=id&id=Account%7Ca-1", "/projections", "/api/projections", "/cluster", "/api/cluster", "/slices", "/api/slices"} {
				code, body, _ := get(t, nil, hs.URL+p)
				t.Logf("%s: %d", p, code)
				if code != http.StatusOK && code != http.StatusNotImplemented {
					t.Errorf("%s: %d %s", p, code, body)
				}
				if strings.Contains(body, "<script>alert") {
					t.Errorf("%s: an unescaped payload", p)
				}
			}
			var ent struct {
				Events []struct {
					Payload Payload `json:"payload"`
				} `json:"events"`
			}
			getJSON(t, hs.URL+"/api/entity?id="+urlQuery("Account|a-1"), &ent)
			if len(ent.Events) != 3 || ent.Events[1].Payload.Text != scriptPayload {
				t.Errorf("timeline of Account|a-1: %+v", ent.Events)
			}
		})
	}
}
