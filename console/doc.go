// Package console is simba's web console: pages that show, live, what the
// nodes keep in a backend — elections, partition groups, scheduled jobs and
// members — and buttons for the cluster-wide operations they obey. It is
// built on package [admin], as the simba command is, and served by it as
// `simba console --etcd … | --zk …`.
//
//	a, err := admin.Open(ctx, b)
//	if err != nil { ... }
//	defer a.Close()
//	c, err := console.New(a, console.WithToken(os.Getenv(console.TokenEnv)))
//	if err != nil { ... }
//	srv := &http.Server{Addr: console.DefaultAddr, Handler: c}
//	srv.RegisterOnShutdown(c.Close) // event streams end, so Shutdown can finish
//	err = srv.ListenAndServe()
//
// # Pages
//
//   - /elections: every election and job: state, holder member, token,
//     session, since when it holds the lease, when it last wrote its status.
//     A holder's deadline is known to its own node only (it is not in the
//     records), so the page shows "since" and "updated" instead.
//   - /groups: per group, a grid of its partitions, each with its owner (the
//     member the assignment gives it to), its holder and token, and whether
//     it is held, vacant or in hand-off; the members, with what they own and
//     hold; mismatches between members.
//   - /jobs: scheduled elections and partitions: state, schedule, next
//     planned start, last result, counts, and recent runs with their source
//     (normal, misfire, trigger, fail-over); /jobs/{lease} the whole history.
//   - /members: every member (of a group, holding an election, or drained),
//     its sessions, what it holds, and its drain state.
//
// A page whose backend cannot be read says so, and answers 503 Service
// Unavailable; it retries by itself. A record that cannot be used (a status
// that is not JSON, a key that names nothing simba writes) does not stop a
// page: it shows everything else, answers 200, and lists the records
// skipped (at most 20, each key and reason cut short) in a notice at its
// top; the log says when the set of records skipped changes.
//
// Pages are rendered on the server (html/template) and readable without
// script. A small script keeps them live: it opens a server-sent event
// stream (/events?view=/groups), on which the server sends the page's main
// part again whenever it changes, and shows times relative to now. The
// server reads the backend once per poll interval (WithPollInterval,
// default 1s) for all open pages together, and not at all while none is
// open; admin offers no watch of the records yet.
//
// # Operations
//
// Each operation button (disable, enable, trigger, resign, drain, undrain)
// asks for a confirmation in a dialog, then posts the operation to
// /api/ops/{op} with a JSON body; the console checks that the target exists
// and suits the operation (a trigger needs a schedule; a resignation names
// the holder's token and is refused once that term is over), then performs
// it through admin.
//
// # Security
//
// The console is safe by default:
//
//   - It is meant to listen on the loopback interface (DefaultAddr).
//   - A read-only console (WithReadOnly) shows no operation buttons and
//     answers every operation with 403.
//   - Otherwise operations need the token given at start (WithToken; New
//     refuses to start without one, ErrNoToken). The page asks its user for
//     it once, keeps it in sessionStorage (this tab only, gone when the tab
//     closes, never in a cookie) and sends it in the TokenHeader header. The
//     server compares SHA-256 digests in constant time, so neither the
//     token nor its length leaks through timing. A missing or wrong token
//     is answered with 401.
//   - Operations are POST only (405 for other methods) with a JSON body
//     (415 otherwise).
//   - Cross-site request forgery is refused three times over. The token is
//     not a cookie, so a browser never attaches it by itself: a forged
//     request has no token. Sending the custom TokenHeader header or an
//     application/json body from another origin needs a CORS preflight,
//     which the console never approves. And http.CrossOriginProtection
//     refuses (403) any unsafe request whose Sec-Fetch-Site is not
//     same-origin, or, from older browsers, whose Origin is not the Host.
//   - DNS rebinding, by which a web site would make its own name resolve to
//     the console's address and read the pages as same-origin, is refused:
//     requests must name the console by an IP address, localhost, or a
//     name given with WithAllowedHosts (403 otherwise).
//   - Every response carries a strict Content-Security-Policy: the page may
//     load its own embedded script, style sheet and icon and talk to its own
//     origin, nothing else — no inline script or style, no frames, no forms.
//     All assets are embedded in the binary; nothing is fetched from the
//     internet. Also: X-Content-Type-Options nosniff, X-Frame-Options DENY,
//     Referrer-Policy no-referrer, Cross-Origin-Opener-Policy and
//     Cross-Origin-Resource-Policy same-origin.
//   - Pages show what the records hold (names, member ids, sessions,
//     tokens), never the backend's address or credentials; error messages
//     shown or logged have URL credentials removed. The log (WithLogger)
//     records each operation — what, on what, from which address, the
//     outcome — and refused requests, never the token.
package console
