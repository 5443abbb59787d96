package console

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/simba-go/simba/admin"
)

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
	// Args, for trigger, are the run's arguments, each "key=value" (the
	// page's text area, a line each), read by admin.ParseArgs: a string
	// without '=', a bad key, a key given twice or arguments beyond
	// admin.CheckArgs's bounds are refused (400).
	Args []string `json:"args,omitempty"`
}

// opReply is the JSON answer to an operation.
type opReply struct {
	OK      bool   `json:"ok"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	// Operator is who the operation was recorded as done by, when the
	// console knows: the operator of the token, or the name sent with it.
	Operator string `json:"operator,omitempty"`
}

// errRefused is an operation refused for its target, with its status.
type errRefused struct {
	status int
	msg    string
}

func (e *errRefused) Error() string { return e.msg }

// maxOpBody bounds the body of an operation request: room for a
// trigger's arguments (admin.MaxArgsBytes of keys and values), escaped as
// JSON.
const maxOpBody = 64 << 10

// serveOp performs an operation: POST /api/ops/{op} with a JSON opRequest.
// The checks, in order: the operation exists (404); the console is not
// read-only (403); the request is not cross-origin (403); its body is JSON
// (415); it carries a token of the console's (401); the body is readable,
// names a target and a reason that is not too long, carries arguments
// only for a trigger and only such as admin.ParseArgs accepts, and the
// operator name sent, if any, is one (400); its target exists and suits
// the operation (404, 409). Only then does it go through admin, as the operator. Each
// outcome is logged with what was asked (see opLog), never the token.
func (s *Server) serveOp(w http.ResponseWriter, r *http.Request) {
	raw, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxOpBody))
	var req opRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	decodeErr := cmp.Or(readErr, dec.Decode(&req))
	l := opLog{s: s, op: r.PathValue("op"), req: req, remote: r.RemoteAddr, operator: r.Header.Get(OperatorHeader)}
	refuse := func(status int, msg string) {
		l.refused(status, msg)
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `SimbaToken header="`+TokenHeader+`"`)
		}
		reply(w, status, opReply{Error: msg})
	}
	if _, ok := operations[l.op]; !ok {
		refuse(http.StatusNotFound, fmt.Sprintf("no operation %q", l.op))
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
	name, ok := s.operator(r.Header.Get(TokenHeader))
	switch {
	case r.Header.Get(TokenHeader) == "":
		refuse(http.StatusUnauthorized, "the operations token is missing")
		return
	case !ok:
		refuse(http.StatusUnauthorized, "wrong operations token")
		return
	case name != "":
		l.operator = name // the token says who: a name sent is ignored
	case l.operator != "":
		if checkOperator(l.operator) != nil {
			refuse(http.StatusBadRequest, fmt.Sprintf("the operator name must be 1 to %d printable characters", MaxOperatorLen))
			return
		}
	}
	if decodeErr != nil {
		refuse(http.StatusBadRequest, "unreadable request: "+decodeErr.Error())
		return
	}
	if req.Target == "" || len(req.Reason) > maxReason {
		refuse(http.StatusBadRequest, fmt.Sprintf("give a target, and a reason of at most %d bytes", maxReason))
		return
	}
	if len(req.Args) > 0 && l.op != "trigger" {
		refuse(http.StatusBadRequest, "arguments are for a trigger only")
		return
	}
	args, err := admin.ParseArgs(req.Args)
	if err != nil {
		refuse(http.StatusBadRequest, strings.TrimPrefix(err.Error(), "simba/admin: "))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.timeout)
	defer cancel()
	err = s.checkTarget(ctx, l.op, req)
	if ref := (*errRefused)(nil); errors.As(err, &ref) {
		s.hub.observe(nil) // its reads worked
		refuse(ref.status, ref.msg)
		return
	}
	if counts(r.Context(), err) {
		s.hub.observe(err)
	}
	if err != nil {
		msg := "reading the backend failed: " + s.describe(err)
		l.failed(http.StatusBadGateway, msg)
		reply(w, http.StatusBadGateway, opReply{Error: msg})
		return
	}
	a := s.admin
	if l.operator != "" {
		a = a.As(l.operator)
	}
	msg, err := s.perform(ctx, a, l.op, req, args)
	if err != nil {
		msg := "the backend failed: " + s.describe(err)
		l.failed(http.StatusBadGateway, msg)
		reply(w, http.StatusBadGateway, opReply{Error: msg})
		return
	}
	if l.operator != "" {
		msg += " (recorded as done by " + l.operator + ")"
	}
	l.done(msg)
	s.hub.poke()
	reply(w, http.StatusOK, opReply{OK: true, Message: msg, Operator: l.operator})
}

// opLog logs the outcome of one operation request: Info when done, Warn
// when refused or failed, each with op, target, operator, reason, remote
// address, outcome ("done", "refused", "failed"), the HTTP status and what
// was answered. Never the token.
type opLog struct {
	s        *Server
	op       string
	req      opRequest
	remote   string
	operator string // the token's operator, else the name sent, else ""
}

func (l opLog) log(level slog.Level, msg, outcome string, status int, answer string) {
	attrs := []any{"op", l.op, "target", l.req.Target, "operator", l.operator, "reason", l.req.Reason,
		"remote", l.remote, "outcome", outcome, "status", status, "answer", answer}
	if len(l.req.Args) > 0 {
		attrs = append(attrs, "args", len(l.req.Args)) // how many: the values are the audit trail's
	}
	l.s.opts.log.Log(context.Background(), level, msg, attrs...)
}

func (l opLog) refused(status int, why string) {
	l.log(slog.LevelWarn, "operation refused", "refused", status, why)
}

func (l opLog) failed(status int, why string) {
	l.log(slog.LevelWarn, "operation failed", "failed", status, redact(why))
}

func (l opLog) done(what string) {
	l.log(slog.LevelInfo, "operation done", "done", http.StatusOK, what)
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
	snap, err := s.admin.Snapshot(ctx)
	if err != nil {
		return err
	}
	es, ops, gs := snap.Elections, snap.Ops, snap.Groups
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

// perform performs an operation through a and says what it did; args are
// a trigger's arguments.
func (s *Server) perform(ctx context.Context, a *admin.Admin, op string, req opRequest, args map[string]string) (string, error) {
	t := req.Target
	switch op {
	case "disable":
		return "disabled " + t + ": it runs nowhere until enabled", a.Disable(ctx, t, reason(req))
	case "enable":
		return "enabled " + t, a.Enable(ctx, t, reason(req))
	case "trigger":
		if len(args) > 0 {
			t += " with " + admin.FormatArgs(args)
		}
		return "triggered " + t + ": its holder runs it once", a.TriggerWith(ctx, req.Target, reason(req), args)
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
