package console

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
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

// MinTokenLen is the least length of an operations token.
const MinTokenLen = 16

// Errors of New.
var (
	// ErrNoToken is returned by New when operations are allowed (not
	// read-only) but no token was given to authorize them.
	ErrNoToken = errors.New("simba/console: operations need a token: give WithToken, or WithReadOnly(true)")
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
	readOnly bool
	token    string
	log      *slog.Logger
	interval time.Duration
	hosts    map[string]bool
}

// defaults returns the options before any Option is applied.
func defaults() options {
	return options{
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		interval: time.Second,
		hosts:    map[string]bool{},
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
func WithToken(token string) Option {
	return func(o *options) error {
		if len(token) < MinTokenLen || strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
			return ErrWeakToken
		}
		o.token = token
		return nil
	}
}

// WithLogger sets the logger of the console (default: discard). It logs
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
// page is open (default 1s, at least 100ms). Each read is bounded by five
// intervals. Nothing is read while no page is open.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("%w: poll interval %v is below 100ms", ErrInvalidOption, d)
		}
		o.interval = d
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
