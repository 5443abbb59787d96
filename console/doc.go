// Package console is simba's web console: pages that show, live, what the
// nodes keep in a backend — elections, partition groups, scheduled jobs and
// members — and buttons for the cluster-wide operations they obey. It is
// built on package [admin], as the simba command is, and served by it as
// `simba console --etcd … | --zk … | --postgres … | --kubernetes` for a
// backend of etcd, ZooKeeper, PostgreSQL or Kubernetes; a program that
// runs its nodes on the in-memory backend serves its own, as below.
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
//   - / (the overview): what needs attention first — vacant elections and
//     partitions, jobs whose last run failed or was interrupted, members
//     close to their deadline or whose health record went stale, disabled
//     elections, jobs and groups, drained members, records skipped — each
//     with why, in words, and a link; then counts of the rest (elections
//     held, partitions held per group, the jobs and their success rate,
//     members live). Jobs are counted as simba status counts them: a
//     scheduled election is one, and so is a group whose partitions are
//     scheduled, however many they are.
//   - /timeline: who held what and when. One lane per election
//     (/timeline), or per partition of a group (/timeline?group=billing),
//     or one partition zoomed with the table of its terms
//     (/timeline?group=billing&p=3); range=15m|1h|24h|all (default 1h).
//     Each term is a bar in its member's colour, labelled with its token
//     where wide enough; gaps (no holder) are hatched; a hand-off ends in
//     a tick, a fail-over in a triangle. A group's page lists its
//     rebalances below the lanes: moves of partitions from one member to
//     another within 5s of each other, grouped, newest first, each with
//     its kind (drain, view-change for a join or a leave that changed the
//     assignment, leave, crash, resign, …), the partitions moved, from
//     whom to whom, and how long each was vacant. The pictures come from
//     each lease's term log (its status's last 32 terms), so they cost no
//     read of their own, and reach as far back as the log does.
//   - /elections: every election and job: state, holder member, token,
//     session, since when it holds the lease, when it last wrote its status.
//     A holder's deadline is known to its own node only (it is not in the
//     records), so the page shows "since" and "updated" instead.
//     /elections/{lease} is one election or partition: its state, holder,
//     token and session, its recent terms (its status's term log), and
//     the operations on it.
//   - /groups: per group, a grid of its partitions, each with its owner (the
//     member the assignment gives it to), its holder and token, and whether
//     it is held, vacant or in hand-off; the members, with what they own and
//     hold; mismatches between members.
//   - /jobs: scheduled elections and partitions: state, schedule, next
//     planned start, last result, counts, and recent runs with their source
//     (normal, misfire, trigger, fail-over) and, for a run of a command,
//     its exit status ("failed exit 3"), a retry's attempt ("attempt 2")
//     and a triggered run's arguments; entries of planned starts that did
//     not happen say how many, why (overlap, misfire, catch-up window,
//     disabled, paused) and until when ("skipped 3 planned starts
//     (overlap)"); with a sparkline of the recent runs; /jobs/{lease} the
//     whole history, charted (skipped starts are counted under the chart,
//     not drawn): each run's duration
//     over its start time, its result in the marker's shape (a cross for a
//     failure), misfires, triggers and fail-overs marked above, and the
//     success rate. The durations are on a log scale when the longest run
//     took more than ten times as long as the typical one, so that one
//     slow run does not flatten the others.
//   - /members: every member (of a group, holding an election, or drained),
//     its one state — active, drained, or gone: no live session (no group
//     membership, no lease held, and its health record stale, as a client
//     killed without closing leaves it) —, its sessions, what it holds,
//     and its headroom: how
//     much of its term it had left at its last renewals (from the health
//     record each client publishes every 5s, records.Health), with the
//     minimum, the TTL and the last round trip; under a third of the TTL
//     is marked close to its deadline, under a tenth very close.
//
// Members have eight colours, the same on every page, chosen to be told
// apart by colour-blind readers and kept away from the red and amber that
// mean danger (vacant, failed, destructive buttons); names and patterns
// are shown too, so colour is never the only cue.
//   - /audit: the audit trail (admin.Admin.Audit), newest first: every
//     operation from the console or the simba command, with when, who, the
//     operation and its target, whether it changed what is in force, the
//     reason and what it did in words; /audit?name=report the operations
//     on one name (an election, job, group, lease or member). It shows the
//     newest 200; a job's page (/jobs/{lease}) shows its own newest 10.
//
// Wherever a disable or a drain applies (an election, a job, a group, a
// group's partitions, a member) the page marks it, with who asked, since
// when (in UTC, and relative to now) and why in a line beside the marker
// and in its tooltip; a partition says when it is its group's disable.
// A job or partition that paused itself after failed runs in a row (its
// schedule's pause-after policy writes a disable marked admin.Op.Paused)
// is marked "paused", with its reason, and its enable button reads
// "Resume"; a paused partition has that button in its row on /jobs.
// Reasons are the operators' words and shown as text, never as markup.
//
// Pages are rendered on the server (html/template) and readable without
// script. A small script keeps them live: it opens a server-sent event
// stream (/events?view=/groups), on which the server sends the page's main
// part again whenever it changes, and shows times relative to now. The
// server reads the backend once per poll interval (WithPollInterval,
// default 1s) for all open pages together, and not at all while none is
// open; admin offers no watch of the records yet.
//
// A record that cannot be used (a status that is not JSON, a key that names
// nothing simba writes, an audit entry of another version) does not stop
// a page: it shows everything else,
// answers 200, and lists the records skipped (at most 20, each key and
// reason cut short) in a notice at its top; the log says when the set of
// records skipped changes.
//
// # Outages
//
// Every read of the backend — a page load, a poll for the event streams, a
// /healthz check, the check of an operation's target — and every operation
// is bounded by the timeout (WithTimeout, default 5s). A page whose backend
// cannot be read answers 503 Service Unavailable with the whole page, whose
// main part says which backend (WithBackendName), what failed and since
// when, and that the console keeps trying; it shows nothing of what the
// backend held before, so nothing stale passes for current. Never a blank
// page, never a hang.
//
// While pages are open the poller retries a failed read after one poll
// interval, then longer, up to four intervals, each wait jittered
// (internal/backoff), and never gives up; a page opening, or any read that
// works again, makes it read at once. Within a read of the backend
// answering again the streams send the pages' truth again, by themselves.
// An outage of any length is survived as long as the admin's reads work
// again once the backend answers (see package admin).
//
// The event stream also sends an event "backend" whenever the backend
// becomes unreachable or reachable again ({"ok":false,"since":…,
// "backend":…,"error":…}), and a "ping" every 10s. The page's live
// indicator says "live" only while its stream is open and the last read
// worked: "backend unreachable since 15:04:05 UTC" while reads fail, and
// "console unreachable, reconnecting" while the stream is down; a stream
// silent for three pings is given up and opened anew.
//
// # Health
//
// GET /healthz tells a supervisor whether the backend can be read: 200 and
// {"status":"ok","backend":…,"checked":…} when the last read, made less
// than a poll interval ago or made now, worked; 503 and
// {"status":"unreachable",…,"unreachable_since":…,"error":…} otherwise. It
// needs no token, reads at most once per poll interval however often it
// is asked (concurrent checks share one read), and answers within the
// timeout. It says nothing of the console itself beyond answering: a
// console cannot mend its backend by restarting, so use it for readiness
// and alerts rather than for restarts.
//
// # Operations
//
// Each operation button (disable, enable, trigger, resign, drain, undrain)
// asks for a confirmation in a dialog, then posts the operation to
// /api/ops/{op} with a JSON body; the console checks that the target exists
// and suits the operation (a trigger needs a schedule; a resignation names
// the holder's token and is refused once that term is over), then performs
// it through admin, recorded under the operator's name (admin.Admin.As).
// A trigger's dialog takes arguments, key=value a line, sent as the body's
// "args" list and read by admin.ParseArgs as the simba command reads its
// --arg: a line without '=', a bad key, a key given twice or arguments
// beyond admin.CheckArgs's bounds are refused (400) with the reason shown
// in the dialog, and arguments with another operation too; the run
// receives them (admin.Admin.TriggerWith). The log line of a trigger with
// arguments says how many (args=2), not what: the audit trail has them.
// Who the operation is recorded as done by:
//
//   - With per-operator tokens (WithOperators; ParseOperators reads them
//     from "name:token" lines), the token names its operator.
//   - With the shared token (WithToken), the page sends the name its user
//     gave (OperatorHeader), taken at its word; without one, the operation
//     is recorded under the admin's own operator name.
//
// The reply says who the operation was recorded as done by.
//
// Each operation request, accepted or refused, is logged (WithLogger):
// "operation done" at Info, "operation refused" (bad token, cross-origin,
// unknown name, bad request: the HTTP status says which) and "operation
// failed" (the backend) at Warn, each with op, target, operator, reason,
// remote (address), outcome (done, refused, failed), status and answer —
// never a token:
//
//	level=INFO msg="operation done" op=disable target=digest operator=alice reason="month end" remote=127.0.0.1:50312 outcome=done status=200 answer="disabled digest: it runs nowhere until enabled (recorded as done by alice)"
//	level=WARN msg="operation refused" op=drain target=a operator=eve reason="" remote=127.0.0.1:50318 outcome=refused status=401 answer="wrong operations token"
//
// # Security
//
// The console is safe by default:
//
//   - It is meant to listen on the loopback interface (DefaultAddr). The
//     simba command serves HTTPS given a certificate, and refuses plain
//     HTTP on any other address unless told --insecure-listen.
//   - A read-only console (WithReadOnly) shows no operation buttons and
//     answers every operation with 403.
//   - Otherwise operations need a token given at start (WithToken or
//     WithOperators; New refuses to start without one, ErrNoToken). The
//     page asks its user for
//     it once, keeps it in sessionStorage (this tab only, gone when the tab
//     closes, never in a cookie) and sends it in the TokenHeader header. The
//     server compares SHA-256 digests in constant time, with every token it
//     knows, so neither a token, nor its length, nor which one matched
//     leaks through timing. A missing or wrong token is answered with 401.
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
//     tokens) and the backend's name if given (WithBackendName; the simba
//     command gives its kind, addresses and prefix), never credentials;
//     error messages shown or logged have URL credentials removed. The log
//     records each operation and refused requests, never a token.
package console
