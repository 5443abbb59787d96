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
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
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
	ttl := 2 * time.Second
	first, err := simba.New(server.Node("first"), simba.WithTTL(ttl), simba.WithMeterProvider(provider))
	if err != nil {
		return err
	}
	defer first.Close()
	second, err := simba.New(server.Node("second"), simba.WithTTL(ttl))
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

	leading := make(chan struct{}, 1)
	report := func(ctx context.Context, term *simba.Term) error {
		select {
		case leading <- struct{}{}:
		default:
		}
		time.Sleep(10 * time.Millisecond) // the work of one report
		return nil
	}
	task, err := first.Election("report").Schedule(simba.FixedRate(200*time.Millisecond), report)
	if err != nil {
		return err
	}
	select {
	case <-leading:
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Fprintln(w, "first leads \"report\"")
	if _, err := second.Election("report").Schedule(simba.FixedRate(200*time.Millisecond), report); err != nil {
		return err
	}
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	<-task.Stop()
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
