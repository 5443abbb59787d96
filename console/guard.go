package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"regexp"
	"strings"
)

// contentSecurityPolicy allows the page nothing but its own embedded
// script, style sheet and icon, and its own origin for the event stream
// and operations: no inline script or style, no frames, no forms, no
// other origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the security headers of every response.
func secure(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
}

// hostAllowed reports whether the Host of r names the console: an IP
// address, localhost, or a name given with WithAllowedHosts. A web page
// that had its own name resolve to the console's address (DNS rebinding)
// sends that name, and is refused.
func (s *Server) hostAllowed(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), "."))
	if host == "" {
		return false
	}
	if host == "localhost" || net.ParseIP(host) != nil {
		return true
	}
	return s.opts.hosts[host]
}

// operator checks the token sent against the console's, in constant time
// (hashing each first hides the tokens' lengths too). It returns whether
// one matched and, for a token of WithOperators, its operator's name. Every
// token is compared, so the time taken does not tell which matched.
func (s *Server) operator(sent string) (name string, ok bool) {
	if sent == "" {
		return "", false
	}
	d := sha256.Sum256([]byte(sent))
	match := func(token string) bool {
		t := sha256.Sum256([]byte(token))
		return subtle.ConstantTimeCompare(d[:], t[:]) == 1
	}
	if s.opts.token != "" && match(s.opts.token) {
		ok = true
	}
	for token, n := range s.opts.operators {
		if match(token) {
			name, ok = n, true
		}
	}
	return name, ok
}

// credentials matches the user information of URLs ("//user:password@").
var credentials = regexp.MustCompile(`//[^/@\s]+@`)

// redact removes credentials that an error message might carry in a URL,
// before it is shown in a page or logged.
func redact(msg string) string { return credentials.ReplaceAllString(msg, "//…@") }
