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

// tokenMatches compares the token sent with the console's in constant
// time; hashing both first hides the token's length too.
func (s *Server) tokenMatches(sent string) bool {
	if s.opts.token == "" || sent == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(sent)), sha256.Sum256([]byte(s.opts.token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// credentials matches the user information of URLs ("//user:password@").
var credentials = regexp.MustCompile(`//[^/@\s]+@`)

// redact removes credentials that an error message might carry in a URL,
// before it is shown in a page or logged.
func redact(msg string) string { return credentials.ReplaceAllString(msg, "//…@") }
