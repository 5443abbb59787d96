package console

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// DefaultAddr is the address the console listens on unless told otherwise:
// the loopback interface only, so that nobody else on the network can
// reach it.
const DefaultAddr = "127.0.0.1:8642"

// TokenEnv is the environment variable from which the simba command reads
// the operations token when --token is not given.
const TokenEnv = "SIMBA_CONSOLE_TOKEN"

// TokenHeader is the HTTP header in which the page sends the operations
// token. Being a custom header, it also keeps cross-origin pages from
// sending operations at all (see the package documentation).
const TokenHeader = "X-Simba-Token"

// OperatorHeader is the HTTP header in which the page sends the name its
// user gave, with the shared token (WithToken); see WithOperators.
const OperatorHeader = "X-Simba-Operator"

// MinTokenLen is the least length of an operations token.
const MinTokenLen = 16

// Errors of New.
var (
	// ErrNoToken is returned by New when operations are allowed (not
	// read-only) but no token was given to authorize them.
	ErrNoToken = errors.New("simba/console: operations need a token: give WithToken or WithOperators, or WithReadOnly(true)")
	// ErrWeakToken is returned by New for a token shorter than MinTokenLen
	// or with characters other than printable ASCII.
	ErrWeakToken = errors.New("simba/console: the token must be at least 16 characters of printable ASCII without spaces")
	// ErrInvalidOption is returned by New for an option given a value it
	// cannot take.
	ErrInvalidOption = errors.New("simba/console: invalid option")
)

// Option configures New. Bad values are refused by New with an error.
type Option func(*options) error

type options struct {
	readOnly  bool
	token     string
	operators map[string]string // by token
	log       *slog.Logger
	interval  time.Duration
	timeout   time.Duration
	backend   string
	hosts     map[string]bool
}

// DefaultTimeout bounds every read of the backend and every operation
// unless WithTimeout says otherwise.
const DefaultTimeout = 5 * time.Second

// defaults returns the options before any Option is applied.
func defaults() options {
	return options{
		log:       slog.Default(),
		interval:  time.Second,
		timeout:   DefaultTimeout,
		hosts:     map[string]bool{},
		operators: map[string]string{},
	}
}

// WithReadOnly turns operations off (default off: operations are allowed
// with the token). A read-only console shows no operation buttons and
// answers every operation with 403 Forbidden; it needs no token.
func WithReadOnly(on bool) Option {
	return func(o *options) error {
		o.readOnly = on
		return nil
	}
}

// WithToken sets the token that authorizes operations (no default: a
// console that is not read-only needs one). The page asks its user for it
// once and sends it in the TokenHeader header; the server compares it in
// constant time. It must be at least MinTokenLen characters of printable
// ASCII without spaces; NewToken makes a good one. The token is never
// logged nor put in a page.
//
// Whoever holds this token may say who they are: the page sends the name
// its user gives in the OperatorHeader header, and the operation is
// recorded in the backend under that name (admin.Admin.As). Without a
// name it is recorded under the admin's own operator name. To know who
// operated rather than take their word for it, give each operator a token
// of their own with WithOperators.
func WithToken(token string) Option {
	return func(o *options) error {
		if !strongToken(token) {
			return ErrWeakToken
		}
		o.token = token
		return nil
	}
}

// strongToken reports whether token is at least MinTokenLen characters of
// printable ASCII without spaces.
func strongToken(token string) bool {
	return len(token) >= MinTokenLen && strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r > '~' }) < 0
}

// MaxOperatorLen is the longest operator name.
const MaxOperatorLen = 64

// checkOperator refuses an operator name that is empty, longer than
// MaxOperatorLen or has characters other than printable ones.
func checkOperator(name string) error {
	if name == "" || len(name) > MaxOperatorLen || !utf8.ValidString(name) ||
		strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("%w: operator name %q: give 1 to %d printable characters", ErrInvalidOption, name, MaxOperatorLen)
	}
	return nil
}

// WithOperators gives operators tokens of their own: byToken maps each
// token to the name of its operator (default none). An operation sent
// with one of these tokens is recorded in the backend under its
// operator's name (admin.Admin.As), logged with it and answered with it;
// a name the page sends is then ignored. Each token must be as WithToken
// requires, each name 1 to MaxOperatorLen printable characters; no two
// operators may share a token. It may be given with WithToken, whose token
// then stays valid for operators who name themselves. ParseOperators reads
// the map from a file.
func WithOperators(byToken map[string]string) Option {
	return func(o *options) error {
		for token, name := range byToken {
			if !strongToken(token) {
				return fmt.Errorf("%w (the token of operator %q)", ErrWeakToken, name)
			}
			if err := checkOperator(name); err != nil {
				return err
			}
			o.operators[token] = name
		}
		return nil
	}
}

// ParseOperators reads operators and their tokens, one "name:token" a line,
// for WithOperators: blank lines and lines starting with "#" are skipped,
// spaces around the name and the token are trimmed; the token is what
// follows the first ":". It refuses (with the line's number, never its
// token) a line without ":", a bad name or token, a name given twice and a
// token given twice.
func ParseOperators(r io.Reader) (map[string]string, error) {
	byToken := map[string]string{}
	names := map[string]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, token, ok := strings.Cut(line, ":")
		name, token = strings.TrimSpace(name), strings.TrimSpace(token)
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: line %d: want name:token", ErrInvalidOption, n)
		case checkOperator(name) != nil:
			return nil, fmt.Errorf("%w: line %d: operator name %q: give 1 to %d printable characters", ErrInvalidOption, n, name, MaxOperatorLen)
		case !strongToken(token):
			return nil, fmt.Errorf("%w: line %d: the token of %q must be at least %d characters of printable ASCII without spaces", ErrInvalidOption, n, name, MinTokenLen)
		case names[name] != 0:
			return nil, fmt.Errorf("%w: line %d: operator %q is on line %d already", ErrInvalidOption, n, name, names[name])
		case byToken[token] != "":
			return nil, fmt.Errorf("%w: line %d: %q has the same token as %q", ErrInvalidOption, n, name, byToken[token])
		}
		byToken[token] = name
		names[name] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading operators: %v", ErrInvalidOption, err)
	}
	if len(byToken) == 0 {
		return nil, fmt.Errorf("%w: no operators given", ErrInvalidOption)
	}
	return byToken, nil
}

// WithLogger sets the logger of the console (default: [slog.Default] when
// New is called; slog.New(slog.DiscardHandler) logs nothing). It logs
// operations (who asked from where, what, the outcome), refused requests
// and backend failures; never the token.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.log = l
		return nil
	}
}

// WithPollInterval sets how often the console reads the backend while a
// page is open (default 1s, at least 100ms). Each read is bounded by the
// timeout (WithTimeout). While reads fail, the console retries with waits
// that grow from one interval to four, jittered (internal/backoff), and
// never gives up. Nothing is read while no page is open.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("%w: poll interval %v is below 100ms", ErrInvalidOption, d)
		}
		o.interval = d
		return nil
	}
}

// WithTimeout bounds every read of the backend — a page load, a poll for
// the event streams, a /healthz check — and every operation (default
// DefaultTimeout, 5s; at least 100ms). A read that has no answer in time
// is answered with an error page (503) saying so, never a blank page or a
// hang.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("%w: timeout %v is below 100ms", ErrInvalidOption, d)
		}
		o.timeout = d
		return nil
	}
}

// WithBackendName names the backend in error pages, /healthz and the log
// (default none: "the backend"), so an operator knows which one failed:
// "etcd, prefix /simba/", say. Pages show it as given: name no
// credentials.
func WithBackendName(name string) Option {
	return func(o *options) error {
		if name == "" || len(name) > 200 || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			return fmt.Errorf("%w: backend name %q: give 1 to 200 printable characters", ErrInvalidOption, name)
		}
		o.backend = name
		return nil
	}
}

// WithAllowedHosts adds host names under which the console may be reached
// (default: none besides "localhost" and IP addresses). Requests naming any
// other host in their Host header are refused with 403, so that a web site
// cannot reach the console through a name of its own that resolves to
// the console's address (DNS rebinding). Give the names operators use when
// the console listens on a routable address behind a name.
func WithAllowedHosts(hosts ...string) Option {
	return func(o *options) error {
		for _, h := range hosts {
			h = strings.ToLower(strings.TrimSpace(h))
			if h == "" || strings.ContainsAny(h, ":/ ") {
				return fmt.Errorf("%w: host %q (give a name without a port)", ErrInvalidOption, h)
			}
			o.hosts[h] = true
		}
		return nil
	}
}

// NewToken returns a random operations token of 26 characters (130 bits),
// for a console started without one.
func NewToken() string { return rand.Text() }
