package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/simba-go/simba/backend/kubernetes"
)

// Kubernetes: --kubernetes (or $SIMBA_KUBERNETES=true, or backend:
// kubernetes in the config file) selects the backend; so does any of
// --kubeconfig, --context and --namespace given on the command line. The
// server, the credentials and TLS are a kubeconfig's, as kubectl finds
// it: --kubeconfig, else $SIMBA_KUBECONFIG, else the config file's
// kubeconfig, else $KUBECONFIG (a list of files, merged), else
// ~/.kube/config; its context is --context (else $SIMBA_KUBE_CONTEXT,
// the config file's context, the kubeconfig's current-context). When no
// kubeconfig file exists and the command runs in a pod
// ($KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT set), it uses the
// pod's service account, as rest.InClusterConfig does: a kubeconfig found
// wins over the in-cluster config, as with kubectl. The namespace is
// --namespace (-n; else $SIMBA_KUBE_NAMESPACE, the config file's
// namespace), else the context's namespace, or in a pod the service
// account's, else "default". --prefix does not apply: the namespace is
// where simba's Lease objects are.

// Environment variables of the Kubernetes backend.
const (
	envKubernetes    = "SIMBA_KUBERNETES"
	envKubeconfig    = "SIMBA_KUBECONFIG"
	envKubeContext   = "SIMBA_KUBE_CONTEXT"
	envKubeNamespace = "SIMBA_KUBE_NAMESPACE"
)

// serviceAccountDir is where a pod's service account is mounted: its
// token, ca.crt and namespace.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// kubeFlags are the settings of the Kubernetes backend, as given.
type kubeFlags struct {
	on                             bool   // --kubernetes
	onEnv                          string // $SIMBA_KUBERNETES, checked by resolve
	kubeconfig, context, namespace string
	from                           map[string]string // where each setting came from, by flag name
	getenv                         func(string) string
	saDir                          string // the service account's directory; "" for serviceAccountDir
}

// kubeSettings are the flags of kubeFlags other than --kubernetes: each
// given on the command line selects the backend as --kubernetes does.
var kubeSettings = []string{"kubeconfig", "context", "namespace", "n"}

// kubeFromEnv returns the Kubernetes settings of the environment.
func kubeFromEnv(getenv func(string) string, saDir string) kubeFlags {
	k := kubeFlags{
		onEnv:      getenv(envKubernetes),
		kubeconfig: getenv(envKubeconfig),
		context:    getenv(envKubeContext),
		namespace:  getenv(envKubeNamespace),
		from:       map[string]string{},
		getenv:     getenv,
		saDir:      saDir,
	}
	k.on, _ = strconv.ParseBool(k.onEnv)
	for name, env := range map[string]string{"kubeconfig": envKubeconfig, "context": envKubeContext, "namespace": envKubeNamespace} {
		if getenv(env) != "" {
			k.from[name] = "$" + env
		}
	}
	return k
}

// register adds the Kubernetes flags to fs (see globals.register).
func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&k.on, "kubernetes", k.on, "use the Kubernetes backend: Lease objects in --namespace, through the kubeconfig's --context, else in a pod its service account (default $"+envKubernetes+"); --kubeconfig, --context or --namespace on the command line selects it too")
	fs.StringVar(&k.kubeconfig, "kubeconfig", k.kubeconfig, "Kubernetes kubeconfig `file` (default $"+envKubeconfig+", else $KUBECONFIG, else ~/.kube/config; when none exists and the command runs in a pod, the pod's service account)")
	fs.StringVar(&k.context, "context", k.context, "the kubeconfig's context `name` (default $"+envKubeContext+", else its current-context)")
	fs.StringVar(&k.namespace, "namespace", k.namespace, "Kubernetes `namespace` of simba's Lease objects (default $"+envKubeNamespace+", else the context's namespace, in a pod its service account's, else default)")
	fs.StringVar(&k.namespace, "n", k.namespace, "Kubernetes `namespace` (as --namespace)")
}

// kubeExplicit returns the first Kubernetes flag given on the command
// line, or "".
func kubeExplicit(explicit map[string]bool) string {
	for _, f := range append([]string{"kubernetes"}, kubeSettings...) {
		if explicit[f] {
			return f
		}
	}
	return ""
}

// label says where a setting came from, for messages.
func (k *kubeFlags) label(name string, explicit map[string]bool) string {
	switch {
	case name == "namespace" && explicit["n"]:
		return "-n"
	case explicit[name]:
		return "--" + name
	case k.from[name] != "":
		from := k.from[name]
		if strings.HasPrefix(from, "config file ") {
			return from + " (" + name + ")"
		}
		return from
	}
	return "--" + name
}

// kubeTarget is a resolved Kubernetes backend: the client configuration
// and the namespace.
type kubeTarget struct {
	cfg       *rest.Config
	namespace string
	context   string // the kubeconfig's context; "" in a pod
	files     string // the kubeconfig files read, for messages; "" in a pod
	sec       *security
}

func (k *kubeTarget) String() string {
	if k.context == "" {
		return fmt.Sprintf("kubernetes at %s (in-cluster, namespace %s)", k.cfg.Host, k.namespace)
	}
	return fmt.Sprintf("kubernetes at %s (context %s, namespace %s)", k.cfg.Host, k.context, k.namespace)
}

// resolve finds the kubeconfig, or the in-cluster config, and the
// namespace (see the comment at the top of this file). Its errors are
// configErrors: exit status 2, before the command starts.
func (k *kubeFlags) resolve(explicit map[string]bool) (*kubeTarget, error) {
	getenv := k.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	rules := &clientcmd.ClientConfigLoadingRules{}
	var from string // where the kubeconfig's name came from
	switch {
	case k.kubeconfig != "":
		rules.ExplicitPath, from = k.kubeconfig, k.label("kubeconfig", explicit)
		if _, err := os.Stat(k.kubeconfig); err != nil {
			return nil, configErrorf("kubeconfig from %s: %s", from, pathError(err))
		}
	case getenv("KUBECONFIG") != "":
		rules.Precedence, from = filepath.SplitList(getenv("KUBECONFIG")), "$KUBECONFIG"
	case getenv("HOME") != "":
		rules.Precedence, from = []string{filepath.Join(getenv("HOME"), ".kube", "config")}, "~/.kube/config"
	}
	var files []string
	for _, f := range append([]string{rules.ExplicitPath}, rules.Precedence...) {
		if f == "" {
			continue
		}
		if _, err := clientcmd.LoadFromFile(f); err != nil {
			if os.IsNotExist(err) {
				continue
			}
			var pe *os.PathError
			if errors.As(err, &pe) {
				return nil, configErrorf("kubeconfig from %s cannot be read: %s", from, pathError(err))
			}
			return nil, configErrorf("kubeconfig %s (from %s) does not parse: %s", f, from, joinLines(err.Error()))
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		if ctx := k.context; ctx != "" {
			return nil, configErrorf("context %q (from %s): no kubeconfig to find it in (%s)", ctx, k.label("context", explicit), noKubeconfig(from, getenv))
		}
		if getenv("KUBERNETES_SERVICE_HOST") != "" && getenv("KUBERNETES_SERVICE_PORT") != "" {
			return k.inCluster(explicit, getenv)
		}
		return nil, configErrorf("no kubeconfig and not in a pod: %s, and $KUBERNETES_SERVICE_HOST is not set; pass --kubeconfig FILE or run in a pod with a service account", noKubeconfig(from, getenv))
	}
	where := "kubeconfig " + strings.Join(files, ", ")
	raw, err := rules.Load()
	if err != nil {
		return nil, configErrorf("%s (from %s) cannot be used: %s", where, from, joinLines(err.Error()))
	}
	name, ctxFrom := k.context, k.label("context", explicit)
	if name == "" {
		name, ctxFrom = raw.CurrentContext, where+" (current-context)"
	}
	switch {
	case len(raw.Contexts) == 0:
		return nil, configErrorf("%s (from %s) has no contexts", where, from)
	case name == "":
		return nil, configErrorf("%s sets no current-context: pass --context (it has %s)", where, contextNames(raw))
	case raw.Contexts[name] == nil:
		return nil, configErrorf("context %q (from %s) is not in %s: it has %s", name, ctxFrom, where, contextNames(raw))
	}
	cc := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, rules)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, configErrorf("context %q of %s cannot be used: %s", name, where, joinLines(err.Error()))
	}
	kt := &kubeTarget{cfg: cfg, context: name, files: strings.Join(files, ", "), sec: &security{}}
	kctx := raw.Contexts[name]
	kt.namespace = k.namespace
	if kt.namespace == "" {
		kt.namespace = kctx.Namespace
	}
	if cl := raw.Clusters[kctx.Cluster]; cl != nil && (cl.CertificateAuthority != "" || len(cl.CertificateAuthorityData) > 0) {
		kt.sec.cacertFrom = fmt.Sprintf("cluster %s of %s", kctx.Cluster, where)
	}
	if u := raw.AuthInfos[kctx.AuthInfo]; u != nil && (u.ClientCertificate != "" || len(u.ClientCertificateData) > 0) {
		kt.sec.certFile, kt.sec.certFrom = "of user "+kctx.AuthInfo, where
	}
	return kt, k.checkNamespace(kt, explicit)
}

// inCluster returns the configuration of the pod's service account, as
// rest.InClusterConfig makes it (the same variables and files; the token
// file is read again as it rotates), from k.saDir so that tests can give
// one.
func (k *kubeFlags) inCluster(explicit map[string]bool, getenv func(string) string) (*kubeTarget, error) {
	dir := k.saDir
	if dir == "" {
		dir = serviceAccountDir
	}
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, configErrorf("in a pod ($KUBERNETES_SERVICE_HOST is set) with no kubeconfig, but its service account token cannot be read: %s (is automountServiceAccountToken off?)", pathError(err))
	}
	if _, err := os.Stat(caFile); err != nil {
		return nil, configErrorf("in a pod ($KUBERNETES_SERVICE_HOST is set) with no kubeconfig, but its service account's CA certificate cannot be read: %s", pathError(err))
	}
	cfg := &rest.Config{
		Host:            "https://" + net.JoinHostPort(getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")),
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile},
		BearerToken:     strings.TrimSpace(string(token)),
		BearerTokenFile: tokenFile,
	}
	kt := &kubeTarget{cfg: cfg, namespace: k.namespace, sec: &security{cacertFrom: caFile}}
	if kt.namespace == "" {
		if ns, err := os.ReadFile(filepath.Join(dir, "namespace")); err == nil {
			kt.namespace = strings.TrimSpace(string(ns))
		}
	}
	return kt, k.checkNamespace(kt, explicit)
}

// checkNamespace defaults the namespace and checks its name.
func (k *kubeFlags) checkNamespace(kt *kubeTarget, explicit map[string]bool) error {
	if kt.namespace == "" {
		kt.namespace = "default"
		return nil
	}
	if errs := validation.IsDNS1123Label(kt.namespace); len(errs) > 0 {
		from := k.label("namespace", explicit)
		if k.namespace == "" {
			from = "the context " + kt.context
		}
		return configErrorf("namespace %q (from %s) is not a namespace name: %s", kt.namespace, from, errs[0])
	}
	return nil
}

// noKubeconfig says where no kubeconfig was found.
func noKubeconfig(from string, getenv func(string) string) string {
	switch from {
	case "$KUBECONFIG":
		return "none of the files of $KUBECONFIG (" + getenv("KUBECONFIG") + ") exists"
	case "~/.kube/config":
		return "--kubeconfig and $" + envKubeconfig + " name none, $KUBECONFIG is not set and " + filepath.Join(getenv("HOME"), ".kube", "config") + " does not exist"
	}
	return "--kubeconfig, $" + envKubeconfig + ", $KUBECONFIG and $HOME are not set"
}

// contextNames lists the contexts of a kubeconfig for messages.
func contextNames(c *clientcmdapi.Config) string {
	if len(c.Contexts) == 0 {
		return "no contexts"
	}
	var names []string
	for n := range c.Contexts {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	s := "context"
	if len(names) > 1 {
		s = "contexts"
	}
	return s + " " + strings.Join(names, ", ")
}

// joinLines makes one line of a message, its runs of white space one
// space each.
func joinLines(s string) string { return strings.Join(strings.Fields(s), " ") }

// settleKube checks the settings of a Kubernetes target: none of the
// other backends' connection settings, which a kubeconfig holds instead,
// and no --prefix.
func (c *connFlags) settleKube(g *globals, getenv func(string) string, explicit map[string]bool) error {
	if g.prefix != "" {
		from := "config file " + c.file + " (prefix)"
		switch {
		case explicit["prefix"]:
			from = "--prefix"
		case getenv(envPrefix) != "":
			from = "$" + envPrefix
		}
		return usagef(nil, "--prefix (from %s) is for etcd, ZooKeeper, PostgreSQL and MySQL: on Kubernetes simba's objects are in --namespace", from)
	}
	for _, name := range []string{"cacert", "cert", "key"} {
		if v := map[string]string{"cacert": c.cacert, "cert": c.cert, "key": c.key}[name]; v != "" {
			return usagef(nil, "--%s (from %s) is for etcd and ZooKeeper: Kubernetes takes TLS from the kubeconfig (--kubeconfig, --context)", name, c.label(name))
		}
	}
	if c.insecure {
		return usagef(nil, "--insecure-skip-tls-verify is for etcd and ZooKeeper: Kubernetes takes TLS from the kubeconfig (insecure-skip-tls-verify of its cluster)")
	}
	for _, name := range []string{"user", "password", "zk-auth"} {
		if explicit[name] || c.from[name] == "config file "+c.file && c.file != "" {
			return usagef(nil, "--%s (from %s) is for etcd or ZooKeeper: Kubernetes takes the credentials of the kubeconfig's user (--context)", name, c.label(name))
		}
	}
	return nil
}

// openKubernetes opens the Kubernetes backend of t.
func openKubernetes(t target) (*kubernetes.Backend, error) {
	if t.kube == nil {
		return nil, errors.New("no Kubernetes configuration")
	}
	cfg := rest.CopyConfig(t.kube.cfg)
	cfg.UserAgent = "simba-command"
	return kubernetes.New(cfg, kubernetes.WithNamespace(t.kube.namespace), kubernetes.WithLogger(t.logger()))
}

// kubeRefusal returns the refusedError that err is if the API server
// refused the credentials or a permission; else nil.
func kubeRefusal(t target, doing string, err error) error {
	var st apierrors.APIStatus
	msg := ""
	if errors.As(err, &st) {
		msg = st.Status().Message
	}
	ns := t.kube.namespace
	switch {
	case apierrors.IsForbidden(err):
		return refusedf("%s: may not do this while %s (Kubernetes: %s): to show, the user needs get, list and watch on leases (coordination.k8s.io) in namespace %s; to operate, also create, update and delete (the Role of kubernetes.Role)", t, doing, msg, ns)
	case apierrors.IsUnauthorized(err):
		return refusedf("%s did not accept the credentials of %s while %s (Kubernetes: %s): check the kubeconfig's user", t, kubeWho(t), doing, msg)
	}
	return nil
}

func kubeWho(t target) string {
	if t.kube.context == "" {
		return "the pod's service account"
	}
	return "context " + t.kube.context
}
