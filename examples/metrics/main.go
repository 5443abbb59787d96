// Command metrics runs a simba node on the in-memory backend that exposes its
// OpenTelemetry instruments on /metrics, in the Prometheus format, and its
// readiness on /ready. A second node in the same process takes the election
// over when the first stops its task, so the hand-off shows in the metrics.
//
//	go run ./examples/metrics                # serves on 127.0.0.1:9464 until Ctrl-C
//	go run ./examples/metrics -for 10s -listen 127.0.0.1:0
//	curl -s 127.0.0.1:9464/metrics | grep simba_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/examples/internal/storylog"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9464", "address for /metrics and /ready")
	runFor := flag.Duration("for", 0, "stop after this long (default: until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
	if err := serve(ctx, os.Stdout, ln, nil); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// serve runs the two nodes and the HTTP endpoints on ln until ctx ends.
// handedOff, if not nil, is closed once the hand-off has happened.
func serve(ctx context.Context, w io.Writer, ln net.Listener, handedOff chan<- struct{}) error {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.Background())

	server := memory.New()
	defer server.Close()
	ttl := 5 * time.Second // one that holds on a loaded machine
	// The clients' warnings and errors, as lines of the story.
	var mu sync.Mutex
	log := storylog.New(func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
	}, slog.LevelWarn)
	first, err := simba.New(server.Node("first"), simba.WithTTL(ttl), simba.WithMeterProvider(provider), simba.WithLogger(log))
	if err != nil {
		return err
	}
	defer first.Close()
	second, err := simba.New(server.Node("second"), simba.WithTTL(ttl), simba.WithLogger(log))
	if err != nil {
		return err
	}
	defer second.Close()

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.Handle("/ready", first.ReadyHandler())
	httpServer := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(ln) }()
	fmt.Fprintf(w, "serving http://%s/metrics and http://%s/ready\n", ln.Addr(), ln.Addr())

	leading := make(chan *simba.Term, 1)
	report := func(ctx context.Context, term *simba.Term) error {
		select {
		case leading <- term:
		default:
		}
		time.Sleep(10 * time.Millisecond) // the work of one report
		return nil
	}
	task, err := first.Election("report").Schedule(simba.FixedRate(200*time.Millisecond), report)
	if err != nil {
		return err
	}
	var term *simba.Term
	select {
	case term = <-leading:
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Fprintln(w, "first leads \"report\"")
	if _, err := second.Election("report").Schedule(simba.FixedRate(200*time.Millisecond), report); err != nil {
		return err
	}
	// first leads until its session has been renewed (every third of the
	// TTL), so that the renewal metrics have a sample.
	for began := term.Deadline(); term.Deadline().Equal(began) && ctx.Err() == nil; {
		time.Sleep(50 * time.Millisecond)
	}
	task.Stop()
	<-task.Done()
	fmt.Fprintln(w, "first handed \"report\" over to second")
	if handedOff != nil {
		close(handedOff)
	}

	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	httpServer.Shutdown(shutdown)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
