package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/kubetest"
)

// The tests of the command on the Kubernetes backend, against a real
// kube-apiserver (internal/kubetest; scripts/with-kube-apiserver.sh builds
// it), with kubeconfig files written from the server's administrator and
// users.

// kubeUser is a user of a test kubeconfig: a name, and the configuration
// of the server that authenticates it.
type kubeUser struct {
	name string
	cfg  *rest.Config
}

// kubeContext is a context of a test kubeconfig.
type kubeContext struct {
	name, user, namespace string
}

// oneJob matches the line of status that shows the nodes' one job.
var oneJob = regexp.MustCompile(`(?m)^jobs +1: `)

// writeKubeconfig writes a kubeconfig of one cluster (the server of the
// users' configurations, trusted by its CA) with the users and contexts
// given, current the first context, and returns its path.
func writeKubeconfig(t *testing.T, path string, users []kubeUser, contexts []kubeContext) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: users[0].cfg.Host, CertificateAuthorityData: users[0].cfg.CAData}
	for _, u := range users {
		cfg.AuthInfos[u.name] = &clientcmdapi.AuthInfo{Token: u.cfg.BearerToken, ClientCertificateData: u.cfg.CertData, ClientKeyData: u.cfg.KeyData}
	}
	for _, c := range contexts {
		cfg.Contexts[c.name] = &clientcmdapi.Context{Cluster: "test", AuthInfo: c.user, Namespace: c.namespace}
	}
	cfg.CurrentContext = contexts[0].name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("writing the kubeconfig: %v", err)
	}
	return path
}

// bindRole creates in ns a Role of verbs on leases and binds it to user.
func bindRole(t *testing.T, adm *rest.Config, ns, user string, verbs ...string) {
	t.Helper()
	c, err := k8s.NewForConfig(adm)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs},
	}}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating role %s: %v", user, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding role %s: %v", user, err)
	}
}

// The end-to-end scenarios, with the built command, on Kubernetes, each in
// a namespace of its own on one kube-apiserver; the nodes are in-process
// clients. Not run here: Errors (etcd's and ZooKeeper's flags;
// TestKubernetesBadInput) and HistoryRecordsAFailOver (opsdemo takes no
// Kubernetes flags).
func TestEndToEndKubernetes(t *testing.T) {
	t.Parallel() // servers of its own; the command-line tests do not touch the process environment
	if testing.Short() {
		t.Skip("builds the command and uses a real kube-apiserver")
	}
	srv := kubetest.Start(t)
	bins := build(t)
	var list []scenario
	for _, sc := range scenarios {
		switch sc.name {
		// Errors: TestKubernetesBadInput; HistoryRecordsAFailOver: the
		// demo takes no Kubernetes flags; TriggerRunsOnce,
		// ResignMovesTheTermWithAHigherToken, AuditTrailShowsWhoWhyAndWhen:
		// operations whose records this backend stores as it stores
		// disable's and drain's, run here, and which TestKubernetes runs
		// through the command; left to the other backends' runs, to keep
		// the suite's time.
		case "Errors", "HistoryRecordsAFailOver", "TriggerRunsOnce", "ResignMovesTheTermWithAHigherToken", "AuditTrailShowsWhoWhyAndWhen":
		default:
			list = append(list, sc)
		}
	}
	adm := srv.Admin()
	runSome(t, list, func(t *testing.T) *cluster {
		ns := srv.Namespace(t)
		kubeconfig := writeKubeconfig(t, filepath.Join(t.TempDir(), "kubeconfig"), []kubeUser{{"admin", adm}}, []kubeContext{{"admin", "admin", ns}})
		return &cluster{
			bins: bins, kind: "kubernetes",
			args: []string{"--kubeconfig", kubeconfig},
			newBackend: func() (backend.Backend, error) {
				return kubernetes.New(adm, kubernetes.WithNamespace(ns))
			},
		}
	})
}

// Every command works on Kubernetes while nodes run on it, through a
// kubeconfig given by --kubeconfig, $KUBECONFIG, ~/.kube/config or the
// config file, with the context's namespace or --namespace; through the
// in-cluster config of a pod's service account; the console serves a page
// from it; a user bound to a read-only Role reads and is refused an
// operation; a user bound to nothing is refused.
func TestKubernetes(t *testing.T) {
	t.Parallel() // servers of its own; the command-line tests do not touch the process environment
	if testing.Short() {
		t.Skip("uses a real kube-apiserver")
	}
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	adm := srv.Admin()
	nodeBackend := func() backend.Backend {
		b, err := kubernetes.New(adm, kubernetes.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() }) // after the node
		return b
	}
	rec := &recorder{}
	a := startNode(t, nodeBackend(), "a", securedTTL, rec)
	a.schedule(t, "report", simba.FixedRate(time.Hour))
	a.whileLeader(t, "ingest")
	a.group(t, "billing", 4)
	startNode(t, nodeBackend(), "z", securedTTL, rec).whileLeader(t, "ingest")

	bindRole(t, adm, ns, "viewer", "get", "list", "watch")
	dir := t.TempDir()
	users := []kubeUser{{"admin", adm}, {"viewer", srv.User(t, "viewer")}, {"nobody", srv.User(t, "nobody")}}
	kubeconfig := writeKubeconfig(t, filepath.Join(dir, "kubeconfig"), users, []kubeContext{
		{"admin", "admin", ns}, {"viewer", "viewer", ns}, {"nobody", "nobody", ns}, {"admin-default", "admin", ""},
	})
	kube := []string{"--kubeconfig", kubeconfig}
	eventually(t, 60*time.Second, "report has run and billing is held", func() bool {
		r := runIn(t, nil, append([]string{"status", "--json"}, kube...)...)
		if r.code != exitOK {
			return false
		}
		o := decode[overview](t, r.stdout)
		return o.Jobs.Total == 1 && o.Groups.Held == 4
	})
	where := fmt.Sprintf("kubernetes at https://%s (context admin, namespace %s)", srv.Addr(), ns)

	t.Run("EveryCommand", func(t *testing.T) {
		for _, args := range everyCommand("30s") {
			if r := runIn(t, nil, append(args, kube...)...); r.code != exitOK {
				t.Errorf("simba %s: %v", strings.Join(args, " "), r)
			}
		}
		// a is undrained: it takes report again, with a larger token.
		var r result
		eventually(t, 30*time.Second, "status report shows a's last term", func() bool {
			r = runIn(t, nil, append([]string{"status", "report", "--json"}, kube...)...)
			v := decode[leaseView](t, r.stdout)
			terms := rec.elected("report")
			return r.code == exitOK && v.Holder != nil && len(terms) > 1 && v.Holder.Token == terms[len(terms)-1].Token
		})
		if out := runIn(t, nil, append([]string{"status"}, kube...)...).stdout; !strings.Contains(out, where) {
			t.Errorf("status does not name the backend as %q:\n%s", where, out)
		}
	})

	t.Run("DisableAndEnable", func(t *testing.T) {
		r := runIn(t, nil, append([]string{"disable", "report", "--reason", "kube e2e"}, kube...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, "disabled report") {
			t.Fatalf("disable: %v", r)
		}
		eventually(t, 30*time.Second, "report is disabled and released", func() bool {
			v := decode[leaseView](t, runIn(t, nil, append([]string{"status", "report", "--json"}, kube...)...).stdout)
			return v.State == "disabled" && !v.Held
		})
		if r := runIn(t, nil, append([]string{"enable", "report"}, kube...)...); r.code != exitOK {
			t.Fatalf("enable: %v", r)
		}
		eventually(t, 30*time.Second, "report is held again", func() bool {
			v := decode[leaseView](t, runIn(t, nil, append([]string{"status", "report", "--json"}, kube...)...).stdout)
			return v.State == "held"
		})
		audit := runIn(t, nil, append([]string{"audit", "report"}, kube...)...)
		if audit.code != exitOK || !strings.Contains(audit.stdout, "kube e2e") {
			t.Errorf("audit report lacks the disable's reason: %v", audit)
		}
	})

	t.Run("WhereTheKubeconfigComesFrom", func(t *testing.T) {
		home := filepath.Join(dir, "home")
		if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(home, ".kube", "config"), string(data))
		cfgFile := writeFile(t, filepath.Join(dir, "config.yaml"), "backend: kubernetes\nkubeconfig: kubeconfig\ncontext: admin-default\nnamespace: "+ns+"\n")
		missing := filepath.Join(dir, "missing")
		for _, tc := range []struct {
			what string
			env  map[string]string
			args []string
			want string // in status's output
		}{
			{"$KUBECONFIG and --kubernetes", map[string]string{"KUBECONFIG": kubeconfig}, []string{"--kubernetes"}, where},
			{"$KUBECONFIG, a list, and $SIMBA_KUBERNETES", map[string]string{"KUBECONFIG": missing + string(filepath.ListSeparator) + kubeconfig, envKubernetes: "true"}, nil, where},
			{"~/.kube/config and --context", map[string]string{"HOME": home}, []string{"--context", "admin"}, where},
			{"$SIMBA_KUBECONFIG over $KUBECONFIG", map[string]string{"KUBECONFIG": missing, envKubeconfig: kubeconfig, envKubernetes: "1"}, nil, where},
			{"--namespace over a context without one", map[string]string{"HOME": home}, []string{"--context", "admin-default", "--namespace", ns},
				fmt.Sprintf("(context admin-default, namespace %s)", ns)},
			{"-n and $SIMBA_KUBE_CONTEXT", map[string]string{"HOME": home, envKubeContext: "admin-default"}, []string{"-n", ns},
				fmt.Sprintf("(context admin-default, namespace %s)", ns)},
			{"the config file", map[string]string{envConfig: cfgFile}, nil, fmt.Sprintf("(context admin-default, namespace %s)", ns)},
		} {
			r := runIn(t, tc.env, append([]string{"status"}, tc.args...)...)
			if r.code != exitOK || !strings.Contains(r.stdout, tc.want) || !oneJob.MatchString(r.stdout) {
				t.Errorf("%s: want exit 0 naming %q and showing the job\n%v", tc.what, tc.want, r)
			}
		}
		// The default namespace of a context without one is default,
		// which holds nothing of the nodes'.
		r := runIn(t, map[string]string{"HOME": home}, "jobs", "--json", "--context", "admin-default")
		if r.code != exitOK || strings.Contains(r.stdout, "report") {
			t.Errorf("jobs in namespace default: want exit 0 and no report\n%v", r)
		}
	})

	t.Run("InCluster", func(t *testing.T) {
		sa := t.TempDir()
		writeFile(t, filepath.Join(sa, "token"), adm.BearerToken+"\n")
		writeFile(t, filepath.Join(sa, "ca.crt"), string(adm.CAData))
		writeFile(t, filepath.Join(sa, "namespace"), ns)
		host, port, err := net.SplitHostPort(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"HOME": filepath.Join(dir, "nohome"), "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, envKubernetes: "true"}
		var out, errb strings.Builder
		c := &cli{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }, open: openBackend, saDir: sa}
		code := c.run(t.Context(), []string{"--timeout", "30s", "status"})
		want := fmt.Sprintf("kubernetes at https://%s (in-cluster, namespace %s)", srv.Addr(), ns)
		if code != exitOK || !strings.Contains(out.String(), want) || !oneJob.MatchString(out.String()) {
			t.Errorf("status in a pod: want exit 0 naming %q\n%v", want, result{code, out.String(), errb.String()})
		}
		// A kubeconfig found wins over the pod's service account.
		env["HOME"] = filepath.Join(dir, "home")
		out.Reset()
		errb.Reset()
		code = c.run(t.Context(), []string{"--timeout", "30s", "status", "--context", "admin"})
		if code != exitOK || !strings.Contains(out.String(), where) {
			t.Errorf("status in a pod with ~/.kube/config: want exit 0 naming %q\n%v", where, result{code, out.String(), errb.String()})
		}
	})

	t.Run("Console", func(t *testing.T) {
		r := &consoleRun{t: t, out: &lockedBuffer{}, errb: &lockedBuffer{}, done: make(chan int, 1)}
		c := &cli{stdout: r.out, stderr: r.errb, getenv: func(string) string { return "" }, open: openBackend}
		startConsoleCLI(t, c, r, "--listen", "127.0.0.1:0", "--read-only", "--timeout", "30s", "--kubeconfig", kubeconfig)
		if r.url == "" {
			t.Fatalf("the console exited: %d\n%s\n%s", r.exited(), r.out, r.errb)
		}
		cl := &http.Client{Timeout: 30 * time.Second}
		defer cl.CloseIdleConnections()
		for _, page := range []string{"/elections", "/healthz"} {
			resp, err := cl.Get(r.url + page)
			if err != nil {
				t.Fatalf("GET %s: %v", page, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s: %s\n%s", page, resp.Status, body)
			}
			if page == "/elections" && (!strings.Contains(string(body), "<html") || !strings.Contains(string(body), "ingest")) {
				t.Errorf("GET /elections: no page showing ingest:\n%s", body)
			}
		}
		if code := r.stop(); code != exitOK {
			t.Errorf("the console exited %d\n%s", code, r.errb)
		}
	})

	t.Run("ReadOnlyRole", func(t *testing.T) {
		viewer := append(kube, "--context", "viewer")
		for _, args := range readCommands {
			if r := runIn(t, nil, append(args, viewer...)...); r.code != exitOK {
				t.Errorf("simba %s as the read-only user: %v", strings.Join(args, " "), r)
			}
		}
		r := runIn(t, nil, append([]string{"disable", "report", "--reason", "not allowed"}, viewer...)...)
		requireOneLine(t, "disable as the read-only user", r, exitRefused, "context viewer", `User "viewer" cannot create resource "leases"`, "create, update and delete")
	})

	t.Run("UserBoundToNothing", func(t *testing.T) {
		r := runIn(t, nil, append([]string{"status"}, append(kube, "--context", "nobody")...)...)
		requireOneLine(t, "status as a user bound to nothing", r, exitRefused, "context nobody", `User "nobody" cannot`, "namespace "+ns, "get, list and watch on leases")
	})
}

// No kubeconfig and no pod, a context that does not exist, a kubeconfig
// that does not parse, and settings that are not Kubernetes': exit 2, one
// line naming the problem, nothing opened.
func TestKubernetesBadInput(t *testing.T) {
	dir := t.TempDir()
	cfg := &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "kube-s3cret-token"}
	kubeconfig := writeKubeconfig(t, filepath.Join(dir, "kubeconfig"), []kubeUser{{"u", cfg}}, []kubeContext{{"one", "u", "shop"}, {"two", "u", ""}})
	noCurrent := filepath.Join(dir, "nocurrent")
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, noCurrent, strings.Replace(string(data), "current-context: one", "current-context: \"\"", 1))
	garbage := writeFile(t, filepath.Join(dir, "garbage"), "apiVersion: v1\nkind: Config\nclusters: [\n")
	badNS := writeKubeconfig(t, filepath.Join(dir, "badns"), []kubeUser{{"u", cfg}}, []kubeContext{{"one", "u", "Not_A_Namespace"}})
	noHome := filepath.Join(dir, "nohome")
	withEndpoints := writeFile(t, filepath.Join(dir, "endpoints.yaml"), "backend: kubernetes\nendpoints: e:1\n")
	nsOnly := writeFile(t, filepath.Join(dir, "ns.yaml"), "namespace: shop\n")
	saNoToken := t.TempDir()
	inPod := map[string]string{"HOME": noHome, "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443", envKubernetes: "true"}
	for _, tc := range []struct {
		what string
		env  map[string]string
		args []string
		want []string
	}{
		{"no kubeconfig and not in a pod", map[string]string{"HOME": noHome}, []string{"--kubernetes"},
			[]string{"no kubeconfig and not in a pod", filepath.Join(noHome, ".kube", "config") + " does not exist", "$KUBERNETES_SERVICE_HOST is not set"}},
		{"no file of $KUBECONFIG exists", map[string]string{"KUBECONFIG": filepath.Join(dir, "a") + ":" + filepath.Join(dir, "b"), envKubernetes: "true"}, nil,
			[]string{"no kubeconfig and not in a pod", "none of the files of $KUBECONFIG"}},
		{"in a pod without a token", inPod, nil,
			[]string{"service account token cannot be read", filepath.Join(saNoToken, "token")}},
		{"--kubeconfig missing", nil, []string{"--kubeconfig", filepath.Join(dir, "missing")},
			[]string{"kubeconfig from --kubeconfig", "no such file"}},
		{"a context that does not exist", nil, []string{"--kubeconfig", kubeconfig, "--context", "three"},
			[]string{`context "three" (from --context) is not in kubeconfig ` + kubeconfig, `it has contexts "one", "two"`}},
		{"a context from $SIMBA_KUBE_CONTEXT that does not exist", map[string]string{envKubeContext: "three"}, []string{"--kubeconfig", kubeconfig},
			[]string{`context "three" (from $` + envKubeContext + `)`, `"one", "two"`}},
		{"no current-context", nil, []string{"--kubeconfig", noCurrent},
			[]string{"sets no current-context: pass --context", `"one", "two"`}},
		{"a context but no kubeconfig", map[string]string{"HOME": noHome}, []string{"--context", "one"},
			[]string{`context "one" (from --context): no kubeconfig`}},
		{"a kubeconfig that does not parse", nil, []string{"--kubeconfig", garbage},
			[]string{"kubeconfig " + garbage + " (from --kubeconfig) does not parse", "line 3"}},
		{"a kubeconfig from $KUBECONFIG that does not parse", map[string]string{"KUBECONFIG": garbage}, []string{"--kubernetes"},
			[]string{"kubeconfig " + garbage + " (from $KUBECONFIG) does not parse"}},
		{"a namespace that is not a name", nil, []string{"--kubeconfig", kubeconfig, "--namespace", "Shop!"},
			[]string{`namespace "Shop!" (from --namespace) is not a namespace name`}},
		{"a context's namespace that is not a name", nil, []string{"--kubeconfig", badNS},
			[]string{`namespace "Not_A_Namespace" (from the context one)`}},
		{"--kubernetes and --etcd", nil, []string{"--kubernetes", "--etcd", "127.0.0.1:1"},
			[]string{"--etcd and --kubernetes both given"}},
		{"--context and --postgres", nil, []string{"--context", "one", "--postgres", "postgres://db/app"},
			[]string{"--postgres and --context both given"}},
		{"$SIMBA_KUBERNETES and $SIMBA_ETCD", map[string]string{envKubernetes: "true", envEtcd: "127.0.0.1:1"}, nil,
			[]string{"both $SIMBA_ETCD and $SIMBA_KUBERNETES are set"}},
		{"$SIMBA_KUBERNETES not a boolean", map[string]string{envKubernetes: "maybe"}, nil,
			[]string{`$SIMBA_KUBERNETES="maybe": want true or false`}},
		{"--prefix", nil, []string{"--kubeconfig", kubeconfig, "--prefix", "/simba/"},
			[]string{"--prefix (from --prefix) is for etcd, ZooKeeper, PostgreSQL and MySQL", "--namespace"}},
		{"$SIMBA_PREFIX", map[string]string{envPrefix: "/x/"}, []string{"--kubeconfig", kubeconfig},
			[]string{"--prefix (from $SIMBA_PREFIX)"}},
		{"--cacert", nil, []string{"--kubeconfig", kubeconfig, "--cacert", "ca.pem"},
			[]string{"--cacert (from --cacert) is for etcd and ZooKeeper: Kubernetes takes TLS from the kubeconfig"}},
		{"--user", nil, []string{"--kubeconfig", kubeconfig, "--user", "bob:pw"},
			[]string{"--user (from --user) is for etcd or ZooKeeper"}},
		{"endpoints in the config file", map[string]string{envConfig: withEndpoints}, nil,
			[]string{"endpoints are for etcd and ZooKeeper: backend kubernetes takes kubeconfig"}},
		{"namespace in the config file without the backend", map[string]string{envConfig: nsOnly}, nil,
			[]string{"namespace is for backend: kubernetes"}},
	} {
		t.Run(strings.ReplaceAll(tc.what, " ", "_"), func(t *testing.T) {
			var out, errb strings.Builder
			opened := false
			c := &cli{stdout: &out, stderr: &errb, getenv: func(k string) string { return tc.env[k] }, saDir: saNoToken,
				open: func(target) (backend.Backend, error) {
					opened = true
					return nil, fmt.Errorf("not opened in this test")
				}}
			r := result{code: c.run(t.Context(), append([]string{"status"}, tc.args...)), stdout: out.String(), stderr: errb.String()}
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d\n%v", r.code, exitUsage, r)
			}
			if first, _, _ := strings.Cut(r.stderr, "\n"); strings.Count(first, "simba: ") != 1 {
				t.Errorf("want one message line\n%v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q\n%v", w, r)
				}
			}
			if opened || strings.Contains(r.stderr, "kube-s3cret-token") || strings.Contains(r.stderr, "panic") {
				t.Errorf("opened %v, or a token or panic printed\n%v", opened, r)
			}
		})
	}
}
