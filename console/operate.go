package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"time"

	"github.com/simba-go/simba/admin"
)

// opTimeout bounds an operation: checking its target, then writing it.
const opTimeout = 10 * time.Second

// maxReason is the longest reason an operation may carry.
const maxReason = 200

// opRequest is the JSON body of an operation.
type opRequest struct {
	// Target is the election, job, group or partition lease, or for drain
	// and undrain the member id.
	Target string `json:"target"`
	// Token, for resign, is the token of the term to end: a resignation
	// for a term that is over already is refused (0: whichever term holds
	// the lease when a node sees the request).
	Token  uint64 `json:"token,omitempty"`
	Reason string `json:"reason,omitempty"` // for disable and drain
}

// opReply is the JSON answer to an operation.
type opReply struct {
	OK      bool   `json:"ok"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

// errRefused is an operation refused for its target, with its status.
type errRefused struct {
	status int
	msg    string
}

func (e *errRefused) Error() string { return e.msg }

// serveOp performs an operation: POST /api/ops/{op} with a JSON opRequest.
// The checks, in order: the console is not read-only (403); the request
// is not cross-origin (403); its body is JSON (415); it carries the token
// (401); its target exists and suits the operation (404, 409). Only then
// does it go through admin.
func (s *Server) serveOp(w http.ResponseWriter, r *http.Request) {
	op := r.PathValue("op")
	log := s.opts.log.With("op", op, "remote", r.RemoteAddr)
	refuse := func(status int, msg string) {
		log.Warn("operation refused", "status", status, "why", msg)
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `SimbaToken header="`+TokenHeader+`"`)
		}
		reply(w, status, opReply{Error: msg})
	}
	if _, ok := operations[op]; !ok {
		refuse(http.StatusNotFound, fmt.Sprintf("no operation %q", op))
		return
	}
	if s.opts.readOnly {
		refuse(http.StatusForbidden, "this console is read-only: it performs no operations")
		return
	}
	if err := s.csrf.Check(r); err != nil {
		refuse(http.StatusForbidden, "cross-origin request refused")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		refuse(http.StatusUnsupportedMediaType, "the body must be application/json")
		return
	}
	switch sent := r.Header.Get(TokenHeader); {
	case sent == "":
		refuse(http.StatusUnauthorized, "the operations token is missing")
		return
	case !s.tokenMatches(sent):
		refuse(http.StatusUnauthorized, "wrong operations token")
		return
	}
	var req opRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		refuse(http.StatusBadRequest, "unreadable request: "+err.Error())
		return
	}
	if req.Target == "" || len(req.Reason) > maxReason {
		refuse(http.StatusBadRequest, fmt.Sprintf("give a target, and a reason of at most %d bytes", maxReason))
		return
	}
	log = log.With("target", req.Target)
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	if err := s.checkTarget(ctx, op, req); err != nil {
		var ref *errRefused
		if errors.As(err, &ref) {
			refuse(ref.status, ref.msg)
		} else {
			log.Warn("operation failed: reading the backend", "err", redact(err.Error()))
			reply(w, http.StatusBadGateway, opReply{Error: "reading the backend failed: " + describe(err)})
		}
		return
	}
	msg, err := s.perform(ctx, op, req)
	if err != nil {
		log.Warn("operation failed", "err", redact(err.Error()))
		reply(w, http.StatusBadGateway, opReply{Error: "the backend failed: " + describe(err)})
		return
	}
	log.Info("operation done", "token", req.Token, "reason", req.Reason)
	s.hub.poke()
	reply(w, http.StatusOK, opReply{OK: true, Message: msg})
}

// reply writes an operation's answer.
func reply(w http.ResponseWriter, status int, r opReply) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(r)
}

// checkTarget refuses an operation on a target the backend does not know,
// or that does not suit it: a trigger of an unscheduled election, the
// resignation of a term that is over. The page only offers operations that
// suit, but it may be out of date.
func (s *Server) checkTarget(ctx context.Context, op string, req opRequest) error {
	l := &loader{ctx: ctx, a: s.admin}
	es, err := l.Elections()
	if err != nil {
		return err
	}
	ops, err := l.Ops()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(es, func(e admin.Election) bool { return e.Name == req.Target })
	switch op {
	case "trigger":
		switch {
		case i < 0:
			return &errRefused{http.StatusNotFound, fmt.Sprintf("no job %q", req.Target)}
		case es[i].Status.Schedule == "":
			return &errRefused{http.StatusConflict, fmt.Sprintf("%q is not scheduled: there is nothing to trigger", req.Target)}
		}
		return nil
	case "resign":
		if i < 0 {
			return &errRefused{http.StatusNotFound, fmt.Sprintf("no election %q", req.Target)}
		}
		h := holder(es[i])
		switch {
		case !es[i].Held:
			return &errRefused{http.StatusConflict, fmt.Sprintf("nobody holds %q", req.Target)}
		case req.Token != 0 && h != nil && h.Token != req.Token:
			return &errRefused{http.StatusConflict, fmt.Sprintf("the term of %q with token %d does not hold it: token %d holds it now", req.Target, req.Token, h.Token)}
		}
		return nil
	case "enable", "undrain":
		if ops.Disabled[req.Target] && op == "enable" || ops.Drained[req.Target] && op == "undrain" {
			return nil
		}
	}
	gs, err := l.Groups()
	if err != nil {
		return err
	}
	switch op {
	case "disable", "enable":
		if i >= 0 || slices.ContainsFunc(gs, func(g admin.Group) bool { return g.Name == req.Target }) {
			return nil
		}
		return &errRefused{http.StatusNotFound, fmt.Sprintf("no election, job or group %q", req.Target)}
	default: // drain, undrain
		for _, g := range gs {
			if slices.ContainsFunc(g.Members, func(m admin.Member) bool { return m.ID == req.Target }) {
				return nil
			}
		}
		for _, e := range es {
			if h := holder(e); h != nil && h.Member == req.Target {
				return nil
			}
		}
		return &errRefused{http.StatusNotFound, fmt.Sprintf("no member %q", req.Target)}
	}
}

// perform performs an operation through admin and says what it did.
func (s *Server) perform(ctx context.Context, op string, req opRequest) (string, error) {
	a, t := s.admin, req.Target
	switch op {
	case "disable":
		return "disabled " + t + ": it runs nowhere until enabled", a.Disable(ctx, t, reason(req))
	case "enable":
		return "enabled " + t, a.Enable(ctx, t, reason(req))
	case "trigger":
		return "triggered " + t + ": its holder runs it once", a.Trigger(ctx, t, reason(req))
	case "resign":
		return "asked the holder of " + t + " to resign", a.Resign(ctx, t, req.Token, reason(req))
	case "drain":
		return "drained member " + t, a.Drain(ctx, t, reason(req))
	case "undrain":
		return "undrained member " + t, a.Undrain(ctx, t, reason(req))
	}
	return "", fmt.Errorf("no operation %q", op)
}

// reason is the reason recorded with an operation.
func reason(req opRequest) string {
	if req.Reason == "" {
		return "from the console"
	}
	return req.Reason
}
