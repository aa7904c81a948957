// Package console is the web console of the annals command (annals
// console): pages rendered on the server with html/template over one open
// store (overview, entities and their timelines, a live tail, projections,
// the cluster, the slices), the same figures as JSON under /api/, and
// server-sent events for the live tail. Its templates, style sheet and
// script are embedded: the console loads nothing from elsewhere.
//
// Safe by default: the command listens on loopback; a bearer token, when
// set, is required on every request (header, or a cookie the ?token= link
// sets); writes (pausing, resuming and resetting projections) are refused
// unless Options.AllowWrites, need a confirmation page and carry a
// per-process form token; the store URL is shown redacted; every value is
// escaped by html/template, or set as text by the script.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Payload is an event's, snapshot's or state's payload as the console
// shows it: Kind names the serializer (json, protobuf, bytes, or its id),
// Text is the payload as the CLI prints it (JSON indented, gzipped JSON
// unpacked, text quoted, other bytes in hex).
type Payload struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
	Size int    `json:"size"`
}

// Options configure a console.
type Options struct {
	// Store is the open store the console shows; the console does not
	// close it.
	Store *stores.Store
	// URL is the store's URL; pages show it redacted (stores.Redact).
	URL string
	// SchemaVersion reports the store's schema version. Nil: the console
	// asks the migrator of URL's scheme (stores.New().Migrator), keeping
	// what it read for 30s, when URL is of the kind of Store; otherwise
	// the version is unknown.
	SchemaVersion func(ctx context.Context) (current, latest int, err error)
	// FormatPayload formats payloads (the annals command passes its own
	// formatting, as its events command prints them). Nil: hex.
	FormatPayload func(serializerID int32, manifest string, p []byte) Payload
	// Token, when not empty, is required on every request: as
	// "Authorization: Bearer TOKEN", or the cookie that opening any page
	// with ?token=TOKEN sets.
	Token string
	// AllowWrites lets the projections page pause, resume and reset
	// instances; without it those requests are refused (403).
	AllowWrites bool
	// LoopbackHosts refuses requests whose Host header is not a loopback
	// name or address (a console listening on loopback, against DNS
	// rebinding).
	LoopbackHosts bool
	// Cluster is the cluster whose membership the cluster page shows by
	// default (cluster.DefaultCluster when empty).
	Cluster string
	// SampleEvery is how often the console samples the events written
	// and the projections' backlog for its charts (default 10s); Samples
	// how many samples it keeps (default 30).
	SampleEvery time.Duration
	Samples     int
	// States fold the events of an entity type (the key) into its state,
	// for the timeline's "state at #N". A registry decodes events; a
	// state needs the behavior's event handler too (BehaviorState).
	States map[string]StateFolder
	// NoStateHint, shown where an entity type has no StateFolder, says
	// how to give one (the annals command: --registry demo).
	NoStateHint string
	// EstimateAbove: when the store's cheap estimate of its events (the
	// SQLite journal's highest ordering, PostgreSQL's pg_class.reltuples)
	// is at least this, the overview shows the estimate instead of the
	// store's statistics, which read the whole journal (default
	// 1,000,000; negative: always the statistics).
	EstimateAbove int64
	// PageSize is how many ids or events a page shows (default 100).
	PageSize int
	// Log receives the console's errors (nil: the standard logger).
	Log *log.Logger
}

// Server is a console over one store.
type Server struct {
	opt   Options
	st    *stores.Store
	csrf  string // the per-process token of the write forms
	pages map[string]*template.Template
	mux   *http.ServeMux

	figures *figures
	once    sync.Once
}

// New returns the console of opt.Store. Call Run to sample the charts'
// figures, and serve Handler.
func New(opt Options) (*Server, error) {
	if opt.Store == nil {
		return nil, errors.New("console: no store")
	}
	if opt.SampleEvery <= 0 {
		opt.SampleEvery = 10 * time.Second
	}
	if opt.Samples <= 0 {
		opt.Samples = 30
	}
	if opt.EstimateAbove == 0 {
		opt.EstimateAbove = defaultEstimateAbove
	}
	if opt.PageSize <= 0 {
		opt.PageSize = 100
	}
	if opt.Cluster == "" {
		opt.Cluster = "default"
	}
	if opt.Log == nil {
		opt.Log = log.Default()
	}
	if opt.SchemaVersion == nil && sameKind(opt.URL, opt.Store.Kind) {
		opt.SchemaVersion = newSchemaVersions(opt.URL).read
	}
	if opt.FormatPayload == nil {
		opt.FormatPayload = func(id int32, _ string, p []byte) Payload {
			return Payload{Kind: fmt.Sprint(id), Text: "0x" + hex.EncodeToString(p), Size: len(p)}
		}
	}
	s := &Server{opt: opt, st: opt.Store, csrf: NewToken(), pages: map[string]*template.Template{}}
	s.figures = newFigures(s)
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// NewToken returns a random token of 32 hex digits.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run samples the figures of the charts every Options.SampleEvery until
// ctx ends.
func (s *Server) Run(ctx context.Context) { s.figures.run(ctx) }

// Handler serves the console.
func (s *Server) Handler() http.Handler { return s.guard(s.mux) }

func (s *Server) parseTemplates() error {
	pages, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	for _, p := range pages {
		name := strings.TrimSuffix(strings.TrimPrefix(p, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", p)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", name, err)
		}
		s.pages[name] = t
	}
	return nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", s.page("overview", s.overview))
	m.HandleFunc("GET /api/overview", s.api(s.overview))
	m.HandleFunc("GET /entities", s.page("entities", s.entities))
	m.HandleFunc("GET /api/ids", s.api(s.entities))
	m.HandleFunc("GET /entity", s.page("entity", s.entity))
	m.HandleFunc("GET /api/entity", s.api(s.entity))
	m.HandleFunc("GET /tail", s.page("tail", s.tailPage))
	m.HandleFunc("GET /api/tail", s.tail)
	m.HandleFunc("GET /projections", s.page("projections", s.projections))
	m.HandleFunc("GET /api/projections", s.api(s.projections))
	m.HandleFunc("POST /projections/{action}", s.projectionAction)
	m.HandleFunc("GET /cluster", s.page("cluster", s.cluster))
	m.HandleFunc("GET /api/cluster", s.api(s.cluster))
	m.HandleFunc("GET /slices", s.page("slices", s.slicesPage))
	m.HandleFunc("GET /api/slices", s.api(s.slicesPage))
	m.HandleFunc("GET /kafka", s.page("kafka", s.kafkaPage))
	m.HandleFunc("GET /api/kafka", s.api(s.kafkaPage))
	m.HandleFunc("GET /tags", s.page("tags", s.tagsPage))
	m.HandleFunc("GET /api/tags", s.api(s.tagsPage))
	s.mux = m
}

// cookieName is the cookie that carries the token after ?token=.
const cookieName = "annals_console_token"

// guard checks the Host header, the token, and sets the headers every
// response carries.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if s.opt.LoopbackHosts && !loopbackHost(r.Host) {
			http.Error(w, "console: this console answers on loopback names only (Host "+r.Host+")", http.StatusMisdirectedRequest)
			return
		}
		if s.opt.Token == "" {
			next.ServeHTTP(w, r)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet {
			if !equal(q, s.opt.Token) {
				s.unauthorized(w)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.opt.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u := *r.URL
			v := u.Query()
			v.Del("token")
			u.RawQuery = v.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(strings.TrimSpace(auth), s.opt.Token) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(cookieName); err == nil && equal(c.Value, s.opt.Token) {
			next.ServeHTTP(w, r)
			return
		}
		s.unauthorized(w)
	})
}

func (s *Server) unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="annals console"`)
	http.Error(w, "console: a token is required: open the link annals console printed (…/?token=TOKEN), or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// loopbackHost reports whether a Host header names this machine's
// loopback: localhost, 127.0.0.0/8 or ::1, with any port.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopback reports whether a listen address (host:port) is on loopback
// only: a loopback address or the name localhost. An empty host (all
// interfaces) is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	return loopbackHost(host)
}

// httpError is an error with the HTTP status it is answered with.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// page is what every page's template gets.
type page struct {
	Title       string
	Nav         string
	Store       storeInfo
	AllowWrites bool
	CSRF        string
	Data        any
}

type storeInfo struct {
	Kind  string `json:"kind"`
	Where string `json:"where"`
	URL   string `json:"url"`
}

func (s *Server) info() storeInfo {
	return storeInfo{Kind: s.st.Kind, Where: stores.Redact(s.st.Where), URL: stores.Redact(s.opt.URL)}
}

var titles = map[string]string{
	"overview": "Overview", "entities": "Entities", "entity": "Entity", "tail": "Live tail",
	"projections": "Projections", "cluster": "Cluster", "slices": "Slices", "kafka": "Kafka journal", "tags": "Tag progress", "confirm": "Confirm", "error": "Error",
}

// page renders a page's template with what fn returns.
func (s *Server) page(name string, fn func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := fn(r)
		if err != nil {
			s.failOn(w, r, name, err)
			return
		}
		s.render(w, http.StatusOK, name, data)
	}
}

func (s *Server) render(w http.ResponseWriter, code int, name string, data any) {
	s.renderOn(w, code, name, name, data)
}

// renderOn renders the page name with the navigation of page nav.
func (s *Server) renderOn(w http.ResponseWriter, code int, name, nav string, data any) {
	t := s.pages[name]
	if nav == "entity" {
		nav = "entities"
	}
	var b strings.Builder
	if err := t.Execute(&b, page{Title: titles[name], Nav: nav, Store: s.info(), AllowWrites: s.opt.AllowWrites, CSRF: s.csrf, Data: data}); err != nil {
		s.opt.Log.Printf("console: rendering %s: %v", name, err)
		http.Error(w, "console: rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, b.String())
}

// api writes what fn returns as JSON.
func (s *Server) api(fn func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := fn(r)
		if err != nil {
			s.failJSON(w, err)
			return
		}
		writeJSON(w, http.StatusOK, data)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.failOn(w, r, "error", err)
}

// failOn answers err on an error page with the navigation of page nav.
func (s *Server) failOn(w http.ResponseWriter, r *http.Request, nav string, err error) {
	code := statusOf(err)
	if code >= 500 && code != http.StatusNotImplemented {
		s.opt.Log.Printf("console: %s %s: %v", r.Method, r.URL.Path, err)
	}
	s.renderOn(w, code, "error", nav, struct {
		Code    int
		Status  string
		Message string
	}{code, http.StatusText(code), err.Error()})
}

func (s *Server) failJSON(w http.ResponseWriter, err error) {
	code := statusOf(err)
	if code >= 500 && code != http.StatusNotImplemented {
		s.opt.Log.Printf("console: %v", err)
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// param returns a query parameter, trimmed.
func param(r *http.Request, name string) string { return strings.TrimSpace(r.URL.Query().Get(name)) }

// link builds a path with query parameters, leaving out empty ones.
func link(path string, kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}
