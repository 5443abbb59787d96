package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/kubetest"
)

// TestMain checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// manifests decodes every object of the files of deploy/, strictly (an
// unknown or duplicate field is an error), in file and document order.
func manifests(t *testing.T) []runtime.Object {
	t.Helper()
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []runtime.Object
	for _, f := range []string{"rbac.yaml", "deployment.yaml"} {
		data, err := os.ReadFile(filepath.Join("deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("deploy/%s: document %d: %v", f, i, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("deploy/%s: document %d: %v", f, i, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

// stripComments drops the comment lines of a YAML document.
func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// The manifests' Role "simba" is the backend's kubernetes.Role, word for
// word in meaning: the example grants the backend what it documents, no
// more.
func TestRoleIsTheBackendsRole(t *testing.T) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(kubernetes.Role), nil, nil)
	if err != nil {
		t.Fatalf("kubernetes.Role does not decode: %v", err)
	}
	want := obj.(*rbacv1.Role)
	var got *rbacv1.Role
	for _, o := range manifests(t) {
		if r, ok := o.(*rbacv1.Role); ok && r.Name == want.Name {
			got = r
		}
	}
	if got == nil {
		t.Fatalf("deploy/rbac.yaml has no Role %q", want.Name)
	}
	if !apiequality.Semantic.DeepEqual(got.Rules, want.Rules) {
		t.Errorf("deploy/rbac.yaml's Role %q has rules\n%+v\nkubernetes.Role has\n%+v", want.Name, got.Rules, want.Rules)
	}
}

// The Deployment runs 3 replicas as the manifests' service account, with
// the pod's name as the member ID, probes on the ports the program serves,
// and a grace period longer than the hand-off's bound and the TTL.
func TestDeploymentFitsTheProgram(t *testing.T) {
	var sa *corev1.ServiceAccount
	var dep *appsv1.Deployment
	for _, o := range manifests(t) {
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			sa = o
		case *appsv1.Deployment:
			dep = o
		}
	}
	if sa == nil || dep == nil {
		t.Fatalf("deploy/ lacks the ServiceAccount (%v) or the Deployment (%v)", sa != nil, dep != nil)
	}
	if r := dep.Spec.Replicas; r == nil || *r != 3 {
		t.Errorf("replicas %v, want 3", r)
	}
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("the pods run as service account %q, not the manifests' %q", pod.ServiceAccountName, sa.Name)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("POD_NAME and POD_NAMESPACE are not the pod's name and namespace from the downward API: %v", env)
	}

	// The program accepts the container's arguments.
	var cfg config
	fs := flagSet(&cfg)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("the program refuses the Deployment's args %q: %v", c.Args, err)
	}
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	if grace <= cfg.shutdownTimeout || grace <= cfg.ttl {
		t.Errorf("terminationGracePeriodSeconds %v is not longer than -shutdown-timeout %v and -ttl %v", grace, cfg.shutdownTimeout, cfg.ttl)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/ready" {
		t.Errorf("the readiness probe is not GET /ready: %+v", c.ReadinessProbe)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("the liveness probe is not GET /healthz: %+v", c.LivenessProbe)
	}
	if !strings.HasSuffix(cfg.listen, ":8080") || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("-listen %q and the container's ports %+v differ", cfg.listen, c.Ports)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("the container has no CPU request or no memory limit: %+v", c.Resources)
	}
}

// Bad configuration is a clear error, before anything starts.
func TestBadConfiguration(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-member", "a", "-listen", ""}, "no in-cluster configuration"},
		{[]string{"-member", "a", "-listen", "", "-context", "x"}, "-context needs -kubeconfig"},
		{[]string{"-member", "a", "-listen", "", "-kubeconfig", filepath.Join(t.TempDir(), "none")}, "-kubeconfig: stat"},
		{[]string{"-member", "a", "-listen", "", "-resync", "0s"}, "-resync must be positive"},
		{[]string{"-member", "", "-listen", ""}, "no member ID"},
	} {
		var out, errs strings.Builder
		if code := runMain(tc.args, &out, &errs); code != 1 || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 1 and an error containing %q", tc.args, code, errs.String(), tc.want)
		}
	}
	// A kubeconfig without the context asked for.
	path := writeKubeconfig(t, &rest.Config{Host: "https://127.0.0.1:1"}, "default")
	var out, errs strings.Builder
	if code := runMain([]string{"-member", "a", "-listen", "", "-kubeconfig", path, "-context", "nope"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "nope") {
		t.Errorf("a missing context: exit %d, stderr %q", code, errs.String())
	}
}

// writeKubeconfig writes a kubeconfig of cfg (server, CA, bearer token)
// with one context, "example", whose namespace is ns, and returns its path.
func writeKubeconfig(t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["simba-example"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["example"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "simba-example", Namespace: ns}
	kc.CurrentContext = "" // -context chooses it
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientset returns a client of cfg whose connections are closed when the
// test ends.
func clientset(t *testing.T, cfg *rest.Config) *k8s.Clientset {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hc.CloseIdleConnections)
	c, err := k8s.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// apply creates obj in namespace ns as c's user, with strict server-side
// field validation.
func apply(ctx context.Context, c k8s.Interface, ns string, obj runtime.Object) error {
	opts := metav1.CreateOptions{FieldValidation: "Strict"}
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(ns).Create(ctx, o, opts)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(ns).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(ns).Create(ctx, o, opts)
	case *appsv1.Deployment:
		_, err = c.AppsV1().Deployments(ns).Create(ctx, o, opts)
	default:
		return fmt.Errorf("the test does not apply a %T", obj)
	}
	return err
}

// ledger records the terms the replicas' partitions begin and end, and
// who holds what.
type ledger struct {
	mu      sync.Mutex
	holders map[int][]string // partition → members in a term of it now
	token   map[int]uint64   // partition → the token of its latest term
	open    map[string]check.Term
	terms   []check.Term
}

func newLedger() *ledger {
	return &ledger{holders: map[int][]string{}, token: map[int]uint64{}, open: map[string]check.Term{}}
}

func (l *ledger) observe(member string, p int, token uint64, begins bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := fmt.Sprintf("%d/%d", p, token)
	if begins {
		l.holders[p] = append(l.holders[p], member)
		l.token[p] = max(l.token[p], token)
		l.open[key] = check.Term{Name: group + "." + strconv.Itoa(p), Token: token, Start: time.Now()}
		return
	}
	l.holders[p] = slices.DeleteFunc(l.holders[p], func(m string) bool { return m == member })
	term := l.open[key]
	delete(l.open, key)
	term.End = time.Now()
	l.terms = append(l.terms, term)
}

// settled returns who holds each partition, or an error saying which
// partition is not held by exactly one member of want.
func (l *ledger) settled(want ...string) (map[int]string, map[int]uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	owners := map[int]string{}
	for p := range partitions {
		h := l.holders[p]
		if len(h) != 1 || !slices.Contains(want, h[0]) {
			return nil, nil, fmt.Errorf("partition %d is held by %v, want one of %v", p, h, want)
		}
		owners[p] = h[0]
	}
	return owners, maps.Clone(l.token), nil
}

// history returns every term, those still open ending now.
func (l *ledger) history() []check.Term {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.terms)
	for _, t := range l.open {
		t.End = time.Now()
		out = append(out, t)
	}
	return out
}

// eventually retries cond, with jittered backoff, until it returns nil,
// and fails the test with cond's last error if d passes first.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for n := 0; ; n++ {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(backoff.Step(n, 20*time.Millisecond, 250*time.Millisecond))
	}
}

// TestReplicasShareThePartitions applies the manifests to a real
// kube-apiserver, runs three replicas of the program authenticated as the
// manifests' service account (a TokenRequest token, through -kubeconfig
// and -context), and checks that every partition is held by exactly one
// replica, that every labelled ConfigMap is reconciled by its partition's
// holder with that term's token, and that the partitions of a replica that
// stops move to the others, which reconcile their ConfigMaps again with
// later tokens. No two replicas ever ran one partition at once.
func TestReplicasShareThePartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver and runs for several seconds")
	}
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	admin := clientset(t, srv.Admin())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// (a) The manifests apply, as they are, to a real API server.
	var saName string
	for _, obj := range manifests(t) {
		if sa, ok := obj.(*corev1.ServiceAccount); ok {
			saName = sa.Name
		}
		if err := apply(ctx, admin, ns, obj); err != nil {
			t.Fatalf("applying %T: %v", obj, err)
		}
	}
	sa := srv.ServiceAccount(t, ns, saName)
	// The replicas are that service account, with nothing beyond its Roles.
	if _, err := clientset(t, sa).CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the service account may list secrets (err %v): the test would not show the Roles suffice", err)
	}

	var names []string
	for i := range 24 {
		name := fmt.Sprintf("cm-%02d", i)
		names = append(names, name)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{selectLabel: "true"}}}
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unlabelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-mine"}}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, unlabelled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// (b) Three replicas as the service account.
	kubeconfig := writeKubeconfig(t, sa, ns)
	book := newLedger()
	log := &await.Buffer{}
	defer func() { t.Log("\n" + log.String()) }()
	stops := map[string]context.CancelFunc{}
	done := map[string]<-chan error{}
	listening := make(chan string, 1)
	members := []string{"replica-a", "replica-b", "replica-c"}
	for i, m := range members {
		rctx, stop := context.WithCancel(ctx)
		stops[m] = stop
		c := config{
			kubeconfig: kubeconfig, context: "example", member: m,
			ttl: 2 * time.Second, resync: 200 * time.Millisecond, shutdownTimeout: 20 * time.Second,
			observe: book.observe,
		}
		if i == 0 {
			c.listen, c.listening = "127.0.0.1:0", listening
		}
		done[m] = await.Returned(func() error { return run(rctx, c, log) })
	}
	defer func() { // a failure below still stops every replica
		for m, stop := range stops {
			stop()
			await.Cleanup(t, done[m], time.Minute, "replica %s to stop", m)
		}
	}()
	defer func() {
		for _, err := range check.Terms(book.history()) {
			t.Error(err)
		}
	}()

	// reconciled checks that every ConfigMap carries its partition's
	// holder and token, read from the server.
	reconciled := func(owners map[int]string, tokens map[int]uint64) error {
		list, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		seen := 0
		for _, cm := range list.Items {
			a := cm.Annotations
			if cm.Name == unlabelled.Name {
				if a[annBy] != "" {
					return fmt.Errorf("configmap %s, not labelled %s, was reconciled by %s", cm.Name, selectLabel, a[annBy])
				}
				continue
			}
			if !slices.Contains(names, cm.Name) {
				continue // kube-root-ca.crt, on a cluster with a controller manager
			}
			seen++
			p := partitionOf(cm.Name)
			want := fmt.Sprintf("%s/%d/%d", owners[p], p, tokens[p])
			if got := fmt.Sprintf("%s/%s/%s", a[annBy], a[annPartition], a[annToken]); got != want {
				return fmt.Errorf("configmap %s is reconciled as %s (by/partition/token), want %s", cm.Name, got, want)
			}
		}
		if seen != len(names) {
			return fmt.Errorf("%d of the %d configmaps listed", seen, len(names))
		}
		return nil
	}

	var owners map[int]string
	var tokens map[int]uint64
	eventually(t, time.Minute, "every partition held by exactly one of the three replicas", func() (err error) {
		owners, tokens, err = book.settled(members...)
		return err
	})
	eventually(t, time.Minute, "every configmap reconciled by its partition's holder", func() error {
		owners, tokens, _ = book.settled(members...)
		return reconciled(owners, tokens)
	})
	t.Logf("partitions held: %v, tokens %v", owners, tokens)

	// The first replica is ready: its session is live.
	addr := await.For(t, listening, time.Second, "replica-a to serve its probes")
	for path, code := range map[string]int{"/ready": http.StatusOK, "/healthz": http.StatusOK} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, code)
		}
	}

	// Stop the replica that holds the most partitions (SIGTERM in a pod):
	// they move to the other two, who reconcile them with later tokens.
	count := map[string]int{}
	for _, m := range owners {
		count[m]++
	}
	stopped := slices.MaxFunc(members, func(a, b string) int { return count[a] - count[b] })
	var moved []int
	for p, m := range owners {
		if m == stopped {
			moved = append(moved, p)
		}
	}
	slices.Sort(moved)
	t0 := time.Now()
	stops[stopped]()
	if err := await.For(t, done[stopped], 30*time.Second, "%s to hand off and stop", stopped); err != nil {
		t.Fatalf("%s: %v", stopped, err)
	}
	delete(stops, stopped)
	others := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == stopped })
	before := tokens
	eventually(t, time.Minute, fmt.Sprintf("partitions %v of %s to move to %v", moved, stopped, others), func() (err error) {
		owners, tokens, err = book.settled(others...)
		return err
	})
	t.Logf("%s stopped; its partitions %v moved in %v: %v", stopped, moved, time.Since(t0).Round(time.Millisecond), owners)
	for _, p := range moved {
		if tokens[p] <= before[p] {
			t.Errorf("partition %d moved with token %d, not above %d", p, tokens[p], before[p])
		}
	}
	eventually(t, time.Minute, "every configmap reconciled by its partition's new holder", func() error {
		owners, tokens, _ = book.settled(others...)
		return reconciled(owners, tokens)
	})
	if !strings.Contains(log.String(), stopped+": handed off; stopped") {
		t.Errorf("%s did not report its hand-off", stopped)
	}
}
