package console

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba/admin"
)

//go:embed static
var staticFS embed.FS

// Server is the web console: an http.Handler serving the pages, their
// event streams and the operations. It reads and operates through an
// admin.Admin, which it does not own. Its background work (reading the
// backend while a page is open) runs until Close.
type Server struct {
	admin *admin.Admin
	opts  options
	mux   *http.ServeMux
	csrf  *http.CrossOriginProtection
	hub   *hub

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the hub's poller

	mu      sync.Mutex
	closed  bool
	streams sync.WaitGroup // event streams being served
}

// New returns a console that reads and operates through a. Unless
// WithReadOnly(true) is given, it needs WithToken or WithOperators:
// operations are refused without a token, and New refuses to start a
// console whose operations nobody could authorize (ErrNoToken).
func New(a *admin.Admin, opts ...Option) (*Server, error) {
	if a == nil {
		return nil, fmt.Errorf("%w: nil admin", ErrInvalidOption)
	}
	o := defaults()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if !o.readOnly && o.token == "" && len(o.operators) == 0 {
		return nil, ErrNoToken
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{admin: a, opts: o, csrf: http.NewCrossOriginProtection(), ctx: ctx, cancel: cancel}
	s.hub = newHub(s)
	s.mux = s.routes()
	s.wg.Go(func() { s.hub.run(ctx) })
	o.log.Info("console ready", "read_only", o.readOnly)
	return s, nil
}

// routes returns the console's routes. Methods other than the ones given
// are answered with 405 Method Not Allowed by the mux.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, n := range nav {
		if n.Path == "/" {
			mux.HandleFunc("GET /{$}", s.servePage)
			continue
		}
		mux.HandleFunc("GET "+n.Path, s.servePage)
	}
	mux.HandleFunc("GET /jobs/{lease}", s.servePage)
	mux.HandleFunc("GET /elections/{lease}", s.servePage)
	mux.HandleFunc("GET /events", s.serveEvents)
	mux.HandleFunc("GET /healthz", s.serveHealth)
	mux.HandleFunc("POST /api/ops/{op}", s.serveOp)
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // no listings
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	return mux
}

// ServeHTTP serves the console. Every response carries a strict
// Content-Security-Policy and its companions, and over HTTPS
// Strict-Transport-Security; requests naming a host that is not the
// console's are refused (see WithAllowedHosts).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	if r.TLS != nil { // served over HTTPS: browsers keep to it
		w.Header().Set("Strict-Transport-Security", "max-age=31536000")
	}
	if !s.hostAllowed(r) {
		s.opts.log.Warn("request refused: host not allowed", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
		http.Error(w, "host not allowed: reach the console by its address, localhost, or a name given to it", http.StatusForbidden)
		return
	}
	if s.isClosed() {
		http.Error(w, "the console is closed", http.StatusServiceUnavailable)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Close stops the console's background work and ends its event streams,
// and returns when they have stopped. Call it before http.Server.Shutdown
// (or register it with http.Server.RegisterOnShutdown): event streams last
// as long as their pages are open, and Shutdown waits for them. After
// Close every request is answered with 503. It does not close the admin.
func (s *Server) Close() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already {
		return
	}
	s.cancel()
	s.wg.Wait()
	s.streams.Wait()
	s.opts.log.Info("console closed")
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// enterStream counts an event stream in, unless the console is closed.
func (s *Server) enterStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams.Add(1)
	return true
}

// newPage returns an empty page of v.
func (s *Server) newPage(v view) *page {
	title := v.Lease
	for _, n := range nav {
		if n.Kind == v.Kind {
			title = n.Label
		}
	}
	return &page{View: v, Title: title, Operate: !s.opts.readOnly, Backend: s.opts.backend, s: s}
}

// load builds the page of v from the backend, within the timeout. A
// failure is shown in the page.
func (s *Server) load(parent context.Context, v view) *page {
	ctx, cancel := context.WithTimeout(parent, s.opts.timeout)
	defer cancel()
	p := s.newPage(v)
	err := p.build(&loader{ctx: ctx, a: s.admin, now: time.Now()})
	if !counts(parent, err) {
		p.Err = "the request ended"
		return p
	}
	st := s.hub.observe(err)
	if err != nil {
		p.failed(err, st)
		s.opts.log.Warn("reading the backend failed", "view", v.Path(), "backend", s.opts.backend, "err", redact(err.Error()))
	}
	return p
}

// servePage serves a whole page.
func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	v, ok := parseView(r.URL.RequestURI()) // the path, and the audit page's filter
	if !ok {
		http.NotFound(w, r)
		return
	}
	p := s.load(r.Context(), v)
	body, err := render("layout", p)
	if err != nil {
		s.opts.log.Error("rendering a page failed", "view", v.Path(), "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	switch {
	case p.NotFound:
		w.WriteHeader(http.StatusNotFound)
	case p.Err != "":
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	w.Write(body)
}
