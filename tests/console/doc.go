// Package console holds the tests of the console (package
// github.com/simba-go/simba/console) that need a browser or a real server,
// and so live in the tests module rather than in the console's own module,
// which requires neither chromedp nor an etcd or ZooKeeper client. They use
// the console's exported API only, as a user would, and share the console's
// own tests' fleet of nodes and page readers (internal/consoletest):
//
//   - TestBrowser: the end-to-end scenario in headless Chromium, on etcd
//     (internal/etcdtest) with the nodes on backend/etcd (and on the memory
//     backend as well with SIMBA_CONSOLE_E2E_MEMORY=1);
//   - TestBrowserOutageEtcd, TestBrowserOutageZooKeeper: the pages while the
//     backend's server is stopped with SIGSTOP, then killed and restarted;
//   - TestBrowserPictures: the timeline, the rebalances, the overview, the
//     members' headroom and a job's chart against what the nodes saw;
//   - TestBrowserRoughEdges: the rough edges of issue 37, one subtest each;
//   - TestPagesListSkippedRecordsOnEtcd: bad records in a real etcd;
//   - BenchmarkPagesEtcd1024: the pages of a big group, read from etcd.
//
// The browser tests need Chromium: run them under scripts/with-chromium.sh,
// which installs Debian's chromium package when missing and sets
// SIMBA_CHROMIUM; without it they skip, or fail under
// SIMBA_REQUIRE_SERVERS=1. They save screenshots of each page under
// build/console-screenshots/ at the root of the repository, and, with
// SIMBA_CONSOLE_DOCS=1, the pictures of the README and docs/OPERATING.md in
// docs/ (console.png, console-overview.png, console-timeline.png,
// console-members.png, console-job.png). From the root of the repository:
//
//	cd tests && ../scripts/with-chromium.sh go test -race ./console/
//	cd tests && SIMBA_CONSOLE_DOCS=1 ../scripts/with-chromium.sh go test -race -run 'TestBrowser$|TestBrowserPictures' ./console/
//	cd tests && go test -run '^$' -bench PagesEtcd1024 -benchtime 5x -benchmem -count 3 ./console/
//
// TestEtcdServerProcess and TestMemberProcess are not tests of their own:
// the outage and rough-edges tests run them, in processes of their own (the
// test binary run again), as an etcd server and a simba node that they can
// stop with SIGSTOP or kill with SIGKILL.
package console
