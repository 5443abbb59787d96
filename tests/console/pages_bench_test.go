package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/console"
	"github.com/simba-go/simba/internal/consoletest"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/records"
)

// BenchmarkPagesEtcd1024 serves the pages of the group of 1,024
// partitions with 32 terms each of the console's BenchmarkPages1024, and
// of 50 jobs with 32 terms and 50 runs of history each, as a console does:
// each request reads the backend (etcd, internal/etcdtest: 1,074 status
// records of about 4.5 KB, 2,500 runs) and renders, so it is the time an
// operator waits for the page, and the work of each poll while the page is
// open. It is here, in the tests module, for its etcd server; see
// docs/BENCHMARKS.md.
func BenchmarkPagesEtcd1024(b *testing.B) {
	srv := etcdtest.Start(b)
	for _, logs := range []bool{true, false} {
		name := "termlogs"
		if !logs {
			name = "nologs" // what the pages cost before the term logs
		}
		b.Run(name, func(b *testing.B) { benchPagesEtcd(b, srv, name, logs) })
	}
}

// benchPagesEtcd serves the pages of BenchmarkPagesEtcd1024 from a prefix
// of srv of their own; without logs, the statuses have no term log.
func benchPagesEtcd(b *testing.B, srv *etcdtest.Server, prefix string, logs bool) {
	be, err := etcd.New(srv.Endpoints(), etcd.WithPrefix("/pages-bench-"+prefix+"/"))
	require.NoError(b, err)
	defer be.Close()
	sess, err := be.Open(b.Context(), backend.SessionOptions{TTL: 10 * time.Second})
	require.NoError(b, err)
	defer sess.Close(context.Background())
	snap := consoletest.BigGroup(time.Now(), 1024, records.TermsLen) // the console draws at the time of the request
	for _, e := range snap.Elections {
		if !logs {
			e.Status.Terms = nil
		}
		_, err := sess.(backend.Records).PutRecord(b.Context(), records.StatusKey(e.Name), records.Encode(e.Status), backend.Condition{})
		require.NoError(b, err)
	}
	// 50 jobs besides, each with its term log and 50 runs of history.
	now := time.Now()
	for j := range 50 {
		lease := fmt.Sprintf("job-%02d", j)
		st := records.Status{Lease: lease, Partition: -1, Schedule: "fixed rate 1m", HistorySeq: records.HistoryLen, Succeeded: records.HistoryLen - 5, Failed: 5}
		for i := range records.TermsLen {
			start := now.Add(-time.Hour + time.Duration(i)*time.Minute)
			t := records.Term{Token: uint64(i + 1), Member: fmt.Sprintf("node-%c", 'a'+i%5), Start: start, End: start.Add(time.Minute), Ended: "moved", TTLms: 3000}
			if i == records.TermsLen-1 {
				t.End, t.Ended = time.Time{}, ""
				st.Holder = &records.Holder{Member: t.Member, Token: t.Token, Since: start}
			}
			if logs {
				st.Terms = append(st.Terms, t)
			}
		}
		for seq := uint64(1); seq <= records.HistoryLen; seq++ {
			start := now.Add(-time.Duration(records.HistoryLen-seq) * time.Minute)
			run := records.Run{Seq: seq, Token: 1, Member: "node-a", Start: start, End: start.Add(time.Duration(seq) * 10 * time.Millisecond), Result: "succeeded", Source: "normal"}
			if seq%10 == 0 {
				run.Result, run.Error = "failed", "boom"
			}
			_, err := sess.(backend.Records).PutRecord(b.Context(), records.HistoryKey(lease, seq), records.Encode(run), backend.Condition{})
			require.NoError(b, err)
		}
		_, err := sess.(backend.Records).PutRecord(b.Context(), records.StatusKey(lease), records.Encode(st), backend.Condition{})
		require.NoError(b, err)
	}
	a, err := admin.Open(b.Context(), be)
	require.NoError(b, err)
	defer a.Close()
	s, err := console.New(a, console.WithReadOnly(true))
	require.NoError(b, err)
	defer s.Close()
	for _, path := range []string{"/timeline?group=big", "/timeline", "/", "/groups", "/jobs", "/jobs/job-07"} {
		b.Run(strings.ReplaceAll(path, "/", "_"), func(b *testing.B) {
			var size int
			for b.Loop() {
				w := get(s, path)
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", path, w.Code, w.Body.String())
				}
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "html-bytes")
		})
	}
}
