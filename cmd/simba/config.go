package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.yaml.in/yaml/v3"
)

// Environment variables of the connection settings (see connFlags). Each
// gives its flag's default; the config file comes after them.
const (
	envConfig   = "SIMBA_CONFIG"
	envTimeout  = "SIMBA_TIMEOUT"
	envCACert   = "SIMBA_CACERT"
	envCert     = "SIMBA_CERT"
	envKey      = "SIMBA_KEY"
	envInsecure = "SIMBA_INSECURE_SKIP_TLS_VERIFY"
	envUser     = "SIMBA_USER"
	envPassword = "SIMBA_PASSWORD"
	envZKAuth   = "SIMBA_ZK_AUTH"
)

// connFlags are the settings that say how to connect to the backend: a
// config file, TLS, and credentials. Each comes from its flag, else from
// its environment variable, else from the config file.
type connFlags struct {
	config                   string
	cacert, cert, key        string
	insecure                 bool
	user, password, zkAuth   string
	passwordFile, zkAuthFile string            // from the config file only
	from                     map[string]string // where each setting came from, by flag name
	file                     string            // the config file read, or ""
	sec                      *security         // built by settle
	kube                     *kubeTarget       // resolved by settle
}

// settle resolves the connection settings of a parsed command line (see
// connFlags.resolve) and, for a command that connects, builds its TLS
// configuration and credentials, asking for a password if need be: before
// --timeout starts.
func (c *cli) settle(p *parsed) error {
	if err := p.g.conn.resolve(&p.g, c.getenv, p.explicit); err != nil {
		return err
	}
	if p.cmd == devCommand {
		return nil // it connects to nothing
	}
	t, err := p.g.target(p.explicit)
	if err != nil {
		return nil // reported when the command opens the backend
	}
	if t.kind == "kubernetes" {
		if err := p.g.conn.settleKube(&p.g, c.getenv, p.explicit); err != nil {
			return err
		}
		p.g.conn.kube, p.g.conn.sec = t.kube, t.sec
		return nil
	}
	if t.kind == "postgres" {
		c.secrets = append(c.secrets, dsnPasswords(t.dsn)...)
		cfg, err := pgconn.ParseConfig(t.dsn)
		if err != nil {
			return configErrorf("%s: %s", p.g.conn.dsnLabel("postgres", envPostgres, p.explicit, c.getenv), dsnError(t.dsn, err))
		}
		c.secrets = append(c.secrets, cfg.Password)
	}
	if t.kind == "mysql" {
		c.secrets = append(c.secrets, mysqlDSNPasswords(t.dsn)...)
	}
	sec, err := p.g.conn.security(t.kind, t.addrs, c.stderr, p.explicit)
	if err != nil {
		return err
	}
	c.secrets = append(c.secrets, sec.password)
	if t.kind == "mysql" {
		t.sec = sec
		password, err := settleMySQL(t, p.g.conn.dsnLabel("mysql", envMySQL, p.explicit, c.getenv))
		if err != nil {
			return err
		}
		c.secrets = append(c.secrets, password)
	}
	p.g.conn.sec = sec
	return nil
}

// register adds the connection flags to fs, with their current values as
// defaults (see globals.register).
func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", c.config, "read settings from this YAML `file` (default $"+envConfig+", else $XDG_CONFIG_HOME/simba/config.yaml or ~/.config/simba/config.yaml if it exists)")
	fs.StringVar(&c.cacert, "cacert", c.cacert, "verify the backend's TLS certificate with the CA certificates in this PEM `file`; any TLS flag turns TLS on (default $"+envCACert+")")
	fs.StringVar(&c.cert, "cert", c.cert, "present the TLS client certificate in this PEM `file` (default $"+envCert+")")
	fs.StringVar(&c.key, "key", c.key, "the private key of --cert, a PEM `file` (default $"+envKey+")")
	fs.BoolVar(&c.insecure, "insecure-skip-tls-verify", c.insecure, "use TLS without verifying the backend's certificate: for tests only (default $"+envInsecure+")")
	fs.StringVar(&c.user, "user", c.user, "etcd user, `name` or name:password (default $"+envUser+"); without a password, --password, $"+envPassword+", the config file's password-file, else a prompt on the terminal")
	fs.StringVar(&c.password, "password", c.password, "etcd `password` of --user; visible to other local users in the process list, prefer $"+envPassword+" or the prompt")
	fs.StringVar(&c.zkAuth, "zk-auth", c.zkAuth, "ZooKeeper digest credentials, `user:password` (default $"+envZKAuth+")")
}

// dsnLabel says where the DSN of flag (postgres or mysql, also the config
// file's key), whose environment variable is env, came from, for messages.
func (c *connFlags) dsnLabel(flag, env string, explicit map[string]bool, getenv func(string) string) string {
	switch {
	case explicit[flag]:
		return "--" + flag
	case getenv(env) != "":
		return "$" + env
	case c.file != "":
		return "config file " + c.file + " (" + flag + ")"
	}
	return "--" + flag
}

// configError is a config file that cannot be used, or a setting whose
// file cannot be read: exit status 2, one line.
type configError struct{ msg string }

func (e *configError) Error() string   { return e.msg }
func (e *configError) exitStatus() int { return exitUsage }

func configErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

// fileConfig is what a config file holds. Passwords are not kept in it:
// password-file and zk-auth-file name files that hold them.
type fileConfig struct {
	Backend               string     `yaml:"backend"` // "etcd", "zookeeper", "postgres", "mysql" or "kubernetes"
	Endpoints             stringList `yaml:"endpoints"`
	Postgres              string     `yaml:"postgres"` // a DSN, without a password
	PostgresNoListen      bool       `yaml:"postgres-no-listen"`
	MySQL                 string     `yaml:"mysql"` // a DSN, without a password
	Kubeconfig            string     `yaml:"kubeconfig"`
	Context               string     `yaml:"context"`
	Namespace             string     `yaml:"namespace"`
	Prefix                string     `yaml:"prefix"`
	Timeout               string     `yaml:"timeout"`
	CACert                string     `yaml:"cacert"`
	Cert                  string     `yaml:"cert"`
	Key                   string     `yaml:"key"`
	InsecureSkipTLSVerify bool       `yaml:"insecure-skip-tls-verify"`
	User                  string     `yaml:"user"`
	PasswordFile          string     `yaml:"password-file"`
	ZKAuthFile            string     `yaml:"zk-auth-file"`
}

// stringList is a YAML list of strings, or one comma-separated string.
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = splitList(n.Value)
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		return err
	}
	*l = s
	return nil
}

// secretKeys are keys refused in a config file, with what to use instead.
var secretKeys = map[string]string{
	"password": "password-file (a file holding it) or $" + envPassword,
	"zk-auth":  "zk-auth-file (a file holding user:password) or $" + envZKAuth,
}

// defaultConfigFile returns the config file to read when neither --config
// nor $SIMBA_CONFIG names one: $XDG_CONFIG_HOME/simba/config.yaml, else
// $HOME/.config/simba/config.yaml, if it exists.
func defaultConfigFile(getenv func(string) string) string {
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	p := filepath.Join(dir, "simba", "config.yaml")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// maxConfigSize bounds the config file read.
const maxConfigSize = 1 << 20

// readConfig reads and checks the config file at path.
func readConfig(path string) (*fileConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, configErrorf("config file: %v", pathError(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, configErrorf("config file: %v", pathError(err))
	}
	if len(data) > maxConfigSize {
		return nil, configErrorf("config file %s: larger than %d bytes", path, maxConfigSize)
	}
	var cfg fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(path, data, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, configErrorf("%s: more than one YAML document", path)
	}
	if cfg.Backend != "" && !slices.Contains([]string{"etcd", "zookeeper", "postgres", "mysql", "kubernetes"}, cfg.Backend) {
		return nil, configErrorf("%s:%d: backend %q: want etcd, zookeeper, postgres, mysql or kubernetes", path, keyLine(data, "backend"), cfg.Backend)
	}
	for _, k := range []struct{ key, val string }{{"kubeconfig", cfg.Kubeconfig}, {"context", cfg.Context}, {"namespace", cfg.Namespace}} {
		if k.val != "" && cfg.Backend != "kubernetes" {
			return nil, configErrorf("%s:%d: %s is for backend: kubernetes", path, keyLine(data, k.key), k.key)
		}
	}
	if len(cfg.Endpoints) > 0 && cfg.Backend == "" {
		return nil, configErrorf("%s:%d: endpoints without a backend: add backend: etcd or backend: zookeeper", path, keyLine(data, "endpoints"))
	}
	switch {
	case cfg.Postgres != "" && cfg.Backend != "postgres":
		return nil, configErrorf("%s:%d: postgres (a DSN) is for backend: postgres", path, keyLine(data, "postgres"))
	case cfg.PostgresNoListen && cfg.Backend != "postgres":
		return nil, configErrorf("%s:%d: postgres-no-listen is for backend: postgres", path, keyLine(data, "postgres-no-listen"))
	case cfg.MySQL != "" && cfg.Backend != "mysql":
		return nil, configErrorf("%s:%d: mysql (a DSN) is for backend: mysql", path, keyLine(data, "mysql"))
	case len(cfg.Endpoints) > 0 && cfg.Backend == "postgres":
		return nil, configErrorf("%s:%d: endpoints are for etcd and ZooKeeper: backend postgres takes postgres: DSN", path, keyLine(data, "endpoints"))
	case len(cfg.Endpoints) > 0 && cfg.Backend == "mysql":
		return nil, configErrorf("%s:%d: endpoints are for etcd and ZooKeeper: backend mysql takes mysql: DSN", path, keyLine(data, "endpoints"))
	case len(cfg.Endpoints) > 0 && cfg.Backend == "kubernetes":
		return nil, configErrorf("%s:%d: endpoints are for etcd and ZooKeeper: backend kubernetes takes kubeconfig, context and namespace", path, keyLine(data, "endpoints"))
	case len(dsnPasswords(cfg.Postgres)) > 0:
		return nil, configErrorf("%s:%d: postgres: the DSN holds a password, and a config file holds no secrets: use password-file (a file holding it) or $%s", path, keyLine(data, "postgres"), envPassword)
	case len(mysqlDSNPasswords(cfg.MySQL)) > 0:
		return nil, configErrorf("%s:%d: mysql: the DSN holds a password, and a config file holds no secrets: use password-file (a file holding it) or $%s", path, keyLine(data, "mysql"), envPassword)
	}
	if cfg.Timeout != "" {
		if d, err := time.ParseDuration(cfg.Timeout); err != nil || d <= 0 {
			return nil, configErrorf("%s:%d: timeout %q: want a positive duration such as 5s", path, keyLine(data, "timeout"), cfg.Timeout)
		}
	}
	// Files named in the config file are relative to its directory.
	dir := filepath.Dir(path)
	for _, p := range []*string{&cfg.CACert, &cfg.Cert, &cfg.Key, &cfg.PasswordFile, &cfg.ZKAuthFile, &cfg.Kubeconfig} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return &cfg, nil
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// yamlError makes one line of a YAML decoding error: the first problem,
// at path:line.
func yamlError(path string, data []byte, err error) error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0] // one line: the first problem
	}
	m := yamlLine.FindStringSubmatch(strings.TrimSpace(msg))
	if m == nil {
		return configErrorf("%s: %s", path, strings.TrimPrefix(msg, "yaml: "))
	}
	line, what := m[1], m[2]
	if f := unknownField.FindStringSubmatch(what); f != nil {
		if instead, ok := secretKeys[f[1]]; ok {
			return configErrorf("%s:%s: %s: a config file holds no secrets: use %s", path, line, f[1], instead)
		}
		return configErrorf("%s:%s: unknown key %q (known: %s)", path, line, f[1], strings.Join(knownKeys(), ", "))
	}
	if n, _ := strconv.Atoi(line); n > 0 {
		return configErrorf("%s:%d: %s", path, n, what)
	}
	return configErrorf("%s: %s", path, what)
}

// knownKeys returns the keys of a config file.
func knownKeys() []string {
	return []string{"backend", "endpoints", "postgres", "postgres-no-listen", "mysql", "kubeconfig", "context", "namespace", "prefix", "timeout", "cacert", "cert", "key", "insecure-skip-tls-verify", "user", "password-file", "zk-auth-file"}
}

// keyLine returns the line of the first top-level key named key in data,
// or 0.
func keyLine(data []byte, key string) int {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i].Line
		}
	}
	return 0
}

// pathError shortens an *os.PathError to "path: what".
func pathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

// resolve settles the connection settings and the backend, prefix and
// timeout of g: a flag given on the command line wins over its
// environment variable, which wins over the config file. It reads the
// config file, if any.
func (c *connFlags) resolve(g *globals, getenv func(string) string, explicit map[string]bool) error {
	c.from = map[string]string{}
	var file fileConfig
	if path := configPath(c.config, getenv, explicit); path != "" {
		f, err := readConfig(path)
		if err != nil {
			return err
		}
		file, c.file = *f, path
	}
	if err := c.resolveConn(file, getenv, explicit); err != nil {
		return err
	}
	if err := g.resolveBackend(file, "config file "+c.file, explicit); err != nil {
		return err
	}
	return g.resolveTimeout(file, getenv, explicit)
}

// configPath returns the config file to read: --config, else
// $SIMBA_CONFIG, else the default one if it exists; "" for none.
func configPath(flagVal string, getenv func(string) string, explicit map[string]bool) string {
	if explicit["config"] {
		return flagVal
	}
	if path := getenv(envConfig); path != "" {
		return path
	}
	return defaultConfigFile(getenv)
}

// resolveConn settles TLS and the credentials: flag, else environment,
// else file, noting in c.from where each came from.
func (c *connFlags) resolveConn(file fileConfig, getenv func(string) string, explicit map[string]bool) error {
	for _, s := range []struct {
		name    string
		val     *string
		env     string
		fileVal string
	}{
		{"cacert", &c.cacert, envCACert, file.CACert},
		{"cert", &c.cert, envCert, file.Cert},
		{"key", &c.key, envKey, file.Key},
		{"user", &c.user, envUser, file.User},
		{"password", &c.password, envPassword, ""},
		{"zk-auth", &c.zkAuth, envZKAuth, ""},
	} {
		switch {
		case explicit[s.name]:
			c.from[s.name] = "--" + s.name
		case getenv(s.env) != "":
			*s.val, c.from[s.name] = getenv(s.env), "$"+s.env
		case s.fileVal != "":
			*s.val, c.from[s.name] = s.fileVal, "config file "+c.file
		}
	}
	if !explicit["password"] && getenv(envPassword) == "" {
		c.passwordFile = file.PasswordFile
	}
	if !explicit["zk-auth"] && getenv(envZKAuth) == "" {
		c.zkAuthFile = file.ZKAuthFile
	}
	switch v := getenv(envInsecure); {
	case explicit["insecure-skip-tls-verify"]:
	case v != "":
		b, err := strconv.ParseBool(v)
		if err != nil {
			return configErrorf("$%s=%q: want true or false", envInsecure, v)
		}
		c.insecure = b
	default:
		c.insecure = file.InsecureSkipTLSVerify
	}
	return nil
}

// resolveBackend settles the backend, the prefix and the backends'
// settings: flags and environment (g, as parsed), else the file, named
// fromFile in g.kube.from.
func (g *globals) resolveBackend(file fileConfig, fromFile string, explicit map[string]bool) error {
	if v := g.kube.onEnv; v != "" && !explicit["kubernetes"] {
		if _, err := strconv.ParseBool(v); err != nil {
			return configErrorf("$%s=%q: want true or false", envKubernetes, v)
		}
	}
	if !g.backendGiven(explicit) {
		switch file.Backend {
		case "kubernetes":
			g.kube.on = true
		case "etcd":
			g.etcd = strings.Join(file.Endpoints, ",")
		case "zookeeper":
			g.zk = strings.Join(file.Endpoints, ",")
		case "postgres":
			g.postgres = file.Postgres
		case "mysql":
			g.mysql = file.MySQL
		}
	}
	if g.prefix == "" && !explicit["prefix"] {
		g.prefix = file.Prefix
	}
	if !explicit["postgres-no-listen"] {
		g.pgNoListen = file.PostgresNoListen
	}
	if file.Backend == "kubernetes" {
		g.kube.resolveFile(file, fromFile, explicit)
	}
	return nil
}

// resolveFile takes the Kubernetes settings that neither a flag nor the
// environment gave from the config file, named fromFile in k.from.
func (k *kubeFlags) resolveFile(file fileConfig, fromFile string, explicit map[string]bool) {
	for _, s := range []struct {
		name      string
		val       *string
		fileVal   string
		explicits bool
	}{
		{"kubeconfig", &k.kubeconfig, file.Kubeconfig, explicit["kubeconfig"]},
		{"context", &k.context, file.Context, explicit["context"]},
		{"namespace", &k.namespace, file.Namespace, explicit["namespace"] || explicit["n"]},
	} {
		if *s.val == "" && !s.explicits && s.fileVal != "" {
			*s.val = s.fileVal
			if k.from == nil {
				k.from = map[string]string{}
			}
			k.from[s.name] = fromFile
		}
	}
}

// backendGiven reports whether the command line or the environment names
// a backend, or gives a backend flag.
func (g *globals) backendGiven(explicit map[string]bool) bool {
	return g.etcd != "" || g.zk != "" || g.postgres != "" || g.mysql != "" || g.kube.on ||
		explicit["etcd"] || explicit["zk"] || explicit["postgres"] || explicit["mysql"] || kubeExplicit(explicit) != ""
}

// resolveTimeout settles the timeout: --timeout, else $SIMBA_TIMEOUT, else
// the file's.
func (g *globals) resolveTimeout(file fileConfig, getenv func(string) string, explicit map[string]bool) error {
	if explicit["timeout"] {
		return nil
	}
	switch v := getenv(envTimeout); {
	case v != "":
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return configErrorf("$%s=%q: want a positive duration such as 5s", envTimeout, v)
		}
		g.timeout = d
	case file.Timeout != "":
		g.timeout, _ = time.ParseDuration(file.Timeout) // checked by readConfig
	}
	return nil
}
