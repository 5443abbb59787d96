package chaos

import (
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/simba-go/simba/internal/check"
)

// register is the shared resource of a run: an HTTP service in the test
// process over a [check.Register], which records every write (lease, token,
// node, time, accepted or not). Fenced, it refuses a token lower than the
// highest it accepted for the lease (409 Conflict); unfenced, the negative
// control, it takes everything.
type register struct {
	reg *check.Register
	srv *httptest.Server
}

func startRegister(fenced bool) *register {
	r := &register{reg: check.NewRegister(fenced)}
	r.srv = httptest.NewServer(r)
	return r
}

// URL is where clients write: POST URL?lease=…&token=…&node=….
func (r *register) URL() string { return r.srv.URL }

func (r *register) Close() { r.srv.Close() }

// Writes returns every write so far, in the order they arrived.
func (r *register) Writes() []check.Write { return r.reg.Writes() }

func (r *register) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	token, err := strconv.ParseUint(q.Get("token"), 10, 64)
	if err != nil || q.Get("lease") == "" {
		http.Error(w, "want lease, token and node", http.StatusBadRequest)
		return
	}
	if !r.reg.Write(q.Get("lease"), token, q.Get("node")) {
		w.WriteHeader(http.StatusConflict)
	}
}
