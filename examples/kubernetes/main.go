// Command kubernetes is a controller whose replicas shard the work between
// them with a simba partition group on simba's Kubernetes backend: every
// replica joins the group "configmaps" of 8 partitions, and reconciles only
// the ConfigMaps of its namespace (those labelled
// example.simba.io/reconcile=true) whose name hashes into a partition it
// holds. No replica sits idle as a standby, as they do behind client-go's
// leaderelection, and no ConfigMap is reconciled by two replicas at once.
//
// "Reconciling" a ConfigMap here is writing three annotations on it, so that
// the work is visible with kubectl:
//
//	example.simba.io/reconciled-by  the replica (its pod name)
//	example.simba.io/partition      the ConfigMap's partition
//	example.simba.io/token          the fencing token of that partition's term
//
// The write is fenced with the term's token: it is an Update preconditioned
// on the resourceVersion the replica read, and the replica writes only if
// the token already on the object (of the same partition) is not higher
// than its own. So once a later term of the partition has written a
// ConfigMap, a deposed replica's late write is refused (a conflict, or
// fence.ErrStale) and can never overwrite it: the resourceVersion makes the
// check and the write one compare-and-swap.
//
// Each replica watches the ConfigMaps with one informer (one list and one
// watch per replica, whatever it holds) and each partition it holds
// reconciles from that cache when its term begins and then every -resync.
//
// # Running it
//
// In a cluster, with the manifests of deploy/ (the ServiceAccount, the
// Roles and RoleBindings, and a Deployment of 3 replicas):
//
//	docker build -f examples/kubernetes/Dockerfile -t simba-example-kubernetes .
//	kubectl create namespace shop
//	kubectl -n shop apply -f examples/kubernetes/deploy/
//	kubectl -n shop create configmap a1 && kubectl -n shop label configmap a1 example.simba.io/reconcile=true
//	kubectl -n shop logs -l app.kubernetes.io/name=simba-example -f
//	kubectl -n shop get configmaps -L example.simba.io/reconcile -o yaml | grep example.simba.io/
//
// The member ID is the pod's name (POD_NAME, from the downward API), the
// namespace the pod's (POD_NAMESPACE), and the configuration the in-cluster
// one (the pod's service-account token). Outside a cluster give a kubeconfig:
//
//	go run ./examples/kubernetes -kubeconfig ~/.kube/config -namespace shop -member a &
//	go run ./examples/kubernetes -kubeconfig ~/.kube/config -namespace shop -member b
//
// # Permissions
//
// deploy/rbac.yaml binds the service account two Roles: "simba", the Role
// the backend needs ([kubernetes.Role]: leases only), and
// "simba-example-configmaps", what the controller's own work needs: list,
// watch and update of configmaps. The example's test runs three replicas
// authenticated as that service account (a TokenRequest token) on a real
// kube-apiserver, so those two Roles are shown to suffice.
//
// # Probes and hand-off
//
// -listen serves /ready (simba's Client.ReadyHandler: 200 while the
// replica's session is live, 503 while it connects and once it shuts down)
// and /healthz (200 while the process serves HTTP). The Deployment's
// readiness probe is /ready, so that a rolling update (maxUnavailable 0)
// stops an old pod only once its replacement has a live session; its
// liveness probe is /healthz and not /ready, so that an API server outage
// (every session lost at once) does not get every replica restarted.
//
// On SIGTERM a replica hands its partitions off gracefully: each partition's
// reconcile loop stops, then its lease is released, and the other replicas
// take it over at once, without waiting for a TTL. That takes a round trip
// or two per partition, bounded by -shutdown-timeout (20s), which the
// Deployment's terminationGracePeriodSeconds (30s) exceeds, as it exceeds
// the TTL (10s). A replica killed without a hand-off (SIGKILL, a node lost)
// has its partitions taken over about 1.1 TTL later (see
// backend/kubernetes: observer-side expiry).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	k8s "k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/examples/internal/storylog"
	"github.com/simba-go/simba/fence"
)

const (
	// group is the partition group's name; partitions its partition
	// count. Every replica must use the same.
	group      = "configmaps"
	partitions = 8

	// The annotations a reconcile writes, and the label that selects the
	// ConfigMaps to reconcile.
	annBy        = "example.simba.io/reconciled-by"
	annPartition = "example.simba.io/partition"
	annToken     = "example.simba.io/token"
	selectLabel  = "example.simba.io/reconcile"
)

// config is what the flags set.
type config struct {
	kubeconfig      string        // -kubeconfig: "" for the in-cluster configuration
	context         string        // -context: the kubeconfig's context ("": its current one)
	namespace       string        // -namespace
	member          string        // -member: the member ID
	ttl             time.Duration // -ttl: the session TTL
	resync          time.Duration // -resync: how often a held partition reconciles
	listen          string        // -listen: the probes' address ("": none)
	shutdownTimeout time.Duration // -shutdown-timeout: the bound of the hand-off

	// rest, when set, is used instead of kubeconfig and the in-cluster
	// configuration (tests).
	rest *rest.Config
	// observe, when set, is called when a term of a partition begins and
	// after it ended (tests).
	observe func(member string, p int, token uint64, begins bool)
	// listening, when set, receives the probes' address once they serve
	// (tests).
	listening chan<- string
}

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain parses args, runs until SIGTERM or SIGINT and returns the exit
// status.
func runMain(args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flagSet(&c)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kubernetes: unexpected arguments %q\n", fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, stdout); err != nil {
		fmt.Fprintln(stderr, "kubernetes:", err)
		return 1
	}
	return 0
}

// flagSet returns the program's flags, which set c.
func flagSet(c *config) *flag.FlagSet {
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("kubernetes", flag.ContinueOnError)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster configuration)")
	fs.StringVar(&c.context, "context", "", "kubeconfig context (default: its current context)")
	fs.StringVar(&c.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leases and ConfigMaps (default $POD_NAMESPACE, else the kubeconfig context's, else \"default\")")
	fs.StringVar(&c.member, "member", firstOf(os.Getenv("POD_NAME"), host), "this replica's member ID (default $POD_NAME, else the host name)")
	fs.DurationVar(&c.ttl, "ttl", 10*time.Second, "session TTL")
	fs.DurationVar(&c.resync, "resync", 10*time.Second, "how often each held partition reconciles its ConfigMaps")
	fs.StringVar(&c.listen, "listen", ":8080", "address of /ready and /healthz (empty: none)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 20*time.Second, "bound of the graceful hand-off on SIGTERM")
	return fs
}

// firstOf returns the first of its arguments that is not empty.
func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// restConfig returns the configuration to reach the API server with and
// the namespace to work in.
func restConfig(c config) (*rest.Config, string, error) {
	if c.rest != nil {
		return c.rest, firstOf(c.namespace, "default"), nil
	}
	if c.kubeconfig == "" {
		if c.context != "" {
			return nil, "", errors.New("-context needs -kubeconfig (the in-cluster configuration has no contexts)")
		}
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("no in-cluster configuration (%w): outside a cluster give -kubeconfig", err)
		}
		return cfg, firstOf(c.namespace, "default"), nil
	}
	if _, err := os.Stat(c.kubeconfig); err != nil {
		return nil, "", fmt.Errorf("-kubeconfig: %w", err)
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: c.kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: c.context})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %s: %w", c.kubeconfig, err)
	}
	ns := c.namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return nil, "", fmt.Errorf("kubeconfig %s: %w", c.kubeconfig, err)
		}
	}
	return cfg, firstOf(ns, "default"), nil
}

// run reconciles this replica's partitions until ctx ends, then hands them
// off.
func run(ctx context.Context, c config, w io.Writer) error {
	if c.member == "" {
		return errors.New("no member ID: give -member or set POD_NAME")
	}
	if c.resync <= 0 {
		return fmt.Errorf("-resync must be positive, got %v", c.resync)
	}
	if c.shutdownTimeout <= 0 {
		return fmt.Errorf("-shutdown-timeout must be positive, got %v", c.shutdownTimeout)
	}
	cfg, ns, err := restConfig(c)
	if err != nil {
		return err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "simba-example-kubernetes/" + c.member
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		// One client for the backend and the informer: client-go's
		// default (5 requests a second) would starve the renewals
		// behind the group's reads. kubernetes.New sets the same.
		cfg.QPS, cfg.Burst = 50, 100
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	cs, err := k8s.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return err
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(w, "%s: %s\n", c.member, fmt.Sprintf(format, args...))
	}

	// The ConfigMaps to reconcile, from one informer: one list and one
	// watch for the replica.
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selectLabel + "=true" }))
	lister := factory.Core().V1().ConfigMaps().Lister()
	informer := factory.Core().V1().ConfigMaps().Informer()
	informerCtx, stopInformer := context.WithCancel(context.Background())
	defer func() {
		stopInformer()
		factory.Shutdown()
	}()
	factory.Start(informerCtx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	synced := cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced)
	cancel()
	if !synced {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("the ConfigMaps of namespace %q were not listed within a minute (are list and watch of configmaps granted?)", ns)
	}

	log := storylog.New(say, slog.LevelWarn) // the client's and the backend's warnings, as this replica's lines
	b, err := kubernetes.NewFromClient(cs, kubernetes.WithNamespace(ns), kubernetes.WithLogger(log))
	if err != nil {
		return err
	}
	defer b.Close() // after the client's shutdown
	client, err := simba.New(b, simba.WithMemberID(c.member), simba.WithTTL(c.ttl), simba.WithLogger(log))
	if err != nil {
		return err
	}
	defer client.Close() // when run fails below; a no-op after Shutdown

	stopProbes, err := serveProbes(c, client, say)
	if err != nil {
		return err
	}
	defer stopProbes()

	r := &reconciler{cms: cs.CoreV1().ConfigMaps(ns), lister: lister, member: c.member, say: say}
	_, err = client.Group(group, partitions).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
		say("partition %d: term %d begins", p, term.Token())
		if c.observe != nil {
			c.observe(c.member, p, term.Token(), true)
			defer c.observe(c.member, p, term.Token(), false)
		}
		defer say("partition %d: term %d ends", p, term.Token())
		for {
			if err := r.reconcile(ctx, p, term.Token()); errors.Is(err, fence.ErrStale) {
				return err // a later term has written: this one is over
			} else if err != nil && ctx.Err() == nil {
				say("partition %d: %v", p, err)
			}
			select {
			case <-ctx.Done(): // the term ends, or the replica stops
				return nil
			case <-time.After(c.resync):
			}
		}
	})
	if err != nil {
		return err
	}
	say("joined group %q (%d partitions) in namespace %s", group, partitions, ns)

	<-ctx.Done()
	say("stopping: handing the partitions off")
	shutdown, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := client.Shutdown(shutdown); err != nil {
		return err
	}
	say("handed off; stopped")
	return nil
}

// serveProbes serves /ready and /healthz on c.listen, if set, and returns
// the function that stops serving.
func serveProbes(c config, client *simba.Client, say func(string, ...any)) (stop func(), err error) {
	if c.listen == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return nil, fmt.Errorf("-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ready", client.ReadyHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	say("probes on http://%s/ready and /healthz", ln.Addr())
	if c.listening != nil {
		c.listening <- ln.Addr().String()
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	}, nil
}

// partitionOf returns the partition of the ConfigMap called name.
func partitionOf(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % partitions)
}

// reconciler reconciles ConfigMaps.
type reconciler struct {
	cms    typedcorev1.ConfigMapInterface
	lister corelisters.ConfigMapLister
	member string
	say    func(string, ...any)
}

// reconcile reconciles the ConfigMaps of partition p, in name order, with
// the fencing token of p's term. It returns an error matching
// fence.ErrStale when a ConfigMap holds a later token of p.
func (r *reconciler) reconcile(ctx context.Context, p int, token uint64) error {
	all, err := r.lister.List(labels.Everything())
	if err != nil {
		return err
	}
	slices.SortFunc(all, func(a, b *corev1.ConfigMap) int { return strings.Compare(a.Name, b.Name) })
	var failed error
	for _, cm := range all {
		if partitionOf(cm.Name) != p {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		switch err := r.write(ctx, cm, p, token); {
		case errors.Is(err, fence.ErrStale):
			return err
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// Changed or deleted since the cache saw it: the next
			// round reads it again.
		case err != nil:
			failed = fmt.Errorf("configmap %s: %w", cm.Name, err)
		}
	}
	return failed
}

// write writes the annotations of a reconcile on cm, a ConfigMap of
// partition p from the cache, unless they are there already: a
// compare-and-swap on cm's resourceVersion that is refused with
// fence.ErrStale when cm holds a later token of p.
func (r *reconciler) write(ctx context.Context, cm *corev1.ConfigMap, p int, token uint64) error {
	a := cm.Annotations
	if a[annPartition] == strconv.Itoa(p) {
		if had, err := strconv.ParseUint(a[annToken], 10, 64); err == nil {
			if had > token {
				return &fence.StaleError{Resource: group + "." + strconv.Itoa(p) + ": configmap " + cm.Name, Token: token, Highest: had}
			}
			if had == token && a[annBy] == r.member {
				return nil // reconciled in this term already
			}
		}
	}
	next := cm.DeepCopy() // the cache's objects are shared: never edit them
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[annBy] = r.member
	next.Annotations[annPartition] = strconv.Itoa(p)
	next.Annotations[annToken] = strconv.FormatUint(token, 10)
	if _, err := r.cms.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	r.say("partition %d: term %d reconciled configmap %s", p, token, cm.Name)
	return nil
}
