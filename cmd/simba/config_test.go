package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/certs"
)

// A flag wins over its environment variable, which wins over the config
// file, setting by setting; the default config file is read when it
// exists; files named in it are relative to it.
func TestConfigPrecedence(t *testing.T) {
	b := memory.New()
	defer b.Close()
	dir := t.TempDir()
	_, err := certs.Generate(filepath.Join(dir, "tls"), "simba")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "pw"), "file-password\n")
	cfg := writeFile(t, filepath.Join(dir, "config.yaml"), `# the settings of the tests
backend: etcd
endpoints: file-1:2379, file-2:2379
prefix: /file/
timeout: 7s
cacert: tls/ca.crt
cert: tls/client.crt
key: tls/client.key
user: file-user
password-file: pw
`)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // the target
		user string // user:password
		tls  bool
	}{
		{"the file alone", map[string]string{envConfig: cfg}, nil,
			"etcd at file-1:2379,file-2:2379 (prefix /file/)", "file-user:file-password", true},
		{"the environment over the file", map[string]string{envConfig: cfg, envEtcd: "env:2379", envPrefix: "/env/", envUser: "env-user", envPassword: "env-password"}, nil,
			"etcd at env:2379 (prefix /env/)", "env-user:env-password", true},
		{"ZooKeeper from the environment over the file's etcd", map[string]string{envConfig: cfg, envZK: "zk:2181"}, nil,
			"zookeeper at zk:2181 (prefix /file/)", ":", true},
		{"flags over both", map[string]string{envConfig: cfg, envEtcd: "env:2379", envUser: "env-user"}, []string{"--etcd", "flag:2379", "--prefix", "/flag/", "--user", "flag-user:flag-password"},
			"etcd at flag:2379 (prefix /flag/)", "flag-user:flag-password", true},
		{"--password over the file's password-file", map[string]string{envConfig: cfg}, []string{"--password", "flag-password"},
			"etcd at file-1:2379,file-2:2379 (prefix /file/)", "file-user:flag-password", true},
		{"--config over $SIMBA_CONFIG", map[string]string{envConfig: filepath.Join(dir, "missing.yaml")}, []string{"--config", cfg},
			"etcd at file-1:2379,file-2:2379 (prefix /file/)", "file-user:file-password", true},
		{"the default file", map[string]string{"HOME": filepath.Join(dir, "home")}, nil,
			"etcd at home:2379", ":", false},
		{"$XDG_CONFIG_HOME over ~/.config", map[string]string{"HOME": filepath.Join(dir, "home"), "XDG_CONFIG_HOME": filepath.Join(dir, "xdg")}, nil,
			"etcd at xdg:2379", ":", false},
		{"no file", map[string]string{envEtcd: "env:2379"}, nil,
			"etcd at env:2379", ":", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.MkdirAll(filepath.Join(dir, "home", ".config", "simba"), 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "home", ".config", "simba", "config.yaml"), "backend: etcd\nendpoints: [home:2379]\n")
			if err := os.MkdirAll(filepath.Join(dir, "xdg", "simba"), 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "xdg", "simba", "config.yaml"), "backend: etcd\nendpoints: [xdg:2379]\n")
			h := newHarness(t, b)
			h.env = tc.env
			h.ok(append([]string{"elections"}, tc.args...)...)
			got := h.opened[0]
			if got.String() != tc.want {
				t.Errorf("target %q, want %q", got, tc.want)
			}
			if up := got.sec.user + ":" + got.sec.password; up != tc.user && !(tc.user == ":" && got.sec.user == "") {
				t.Errorf("credentials %q, want %q", up, tc.user)
			}
			if (got.sec.tls != nil) != tc.tls {
				t.Errorf("TLS %v, want %v", got.sec.tls != nil, tc.tls)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		for _, tc := range []struct {
			env  map[string]string
			args []string
			want time.Duration
		}{
			{map[string]string{envConfig: cfg}, nil, 7 * time.Second},
			{map[string]string{envConfig: cfg, envTimeout: "3s"}, nil, 3 * time.Second},
			{map[string]string{envConfig: cfg, envTimeout: "3s"}, []string{"--timeout", "2s"}, 2 * time.Second},
			{map[string]string{envEtcd: "e:1"}, nil, defaultTimeout},
		} {
			h := newHarness(t, b)
			h.env = tc.env
			p, code, done := (&cli{stdout: &strings.Builder{}, stderr: &strings.Builder{}, getenv: func(k string) string { return tc.env[k] }}).parse(append([]string{"jobs"}, tc.args...))
			if done {
				t.Fatalf("parse: exit %d", code)
			}
			if p.g.timeout != tc.want {
				t.Errorf("env %v args %v: timeout %v, want %v", tc.env, tc.args, p.g.timeout, tc.want)
			}
		}
	})
	t.Run("ZooKeeper credentials from a file", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "zk-auth"), "app:zk-secret\n")
		zcfg := writeFile(t, filepath.Join(dir, "zk.yaml"), "backend: zookeeper\nendpoints: [z1:2181]\nprefix: /app\nzk-auth-file: zk-auth\n")
		h := newHarness(t, b)
		h.env = map[string]string{envConfig: zcfg}
		h.ok("jobs")
		if got := h.opened[0]; got.String() != "zookeeper at z1:2181 (prefix /app)" || got.sec.zkAuth != "app:zk-secret" {
			t.Errorf("target %v, zk auth %q", got, got.sec.zkAuth)
		}
		// A new harness: the first run opened the default prefix too, for
		// its hint that /app holds nothing.
		h = newHarness(t, b)
		h.env = map[string]string{envConfig: zcfg, envZKAuth: "env:pw"}
		h.ok("jobs")
		if got := h.opened[0]; got.sec.zkAuth != "env:pw" {
			t.Errorf("zk auth %q, want $%s's", got.sec.zkAuth, envZKAuth)
		}
	})
}

// A config file that cannot be used, and a setting that cannot, each give
// one line on stderr saying what and where (file:line for YAML), exit
// status 2, and open no backend.
func TestConfigErrors(t *testing.T) {
	b := memory.New()
	defer b.Close()
	dir := t.TempDir()
	file := func(name, content string) string { return writeFile(t, filepath.Join(dir, name), content) }
	unknown := file("unknown.yaml", "backend: etcd\nendpoints: [e:1]\nendpionts: [typo:1]\n")
	badYAML := file("bad.yaml", "backend: etcd\nendpoints: [e:1\nprefix: /x/\n")
	secret := file("secret.yaml", "backend: etcd\nendpoints: [e:1]\nuser: app\npassword: hunter2\n")
	badBackend := file("backend.yaml", "backend: consul\n")
	badTimeout := file("timeout.yaml", "backend: etcd\nendpoints: [e:1]\ntimeout: soon\n")
	noBackend := file("nobackend.yaml", "endpoints: [e:1]\n")
	wrongType := file("type.yaml", "backend: etcd\nendpoints: [e:1]\ninsecure-skip-tls-verify: maybe\n")
	twoDocs := file("two.yaml", "backend: etcd\n---\nbackend: etcd\n")
	noPasswordFile := file("nopw.yaml", "backend: etcd\nendpoints: [e:1]\nuser: app\npassword-file: missing-password\n")
	if err := os.Mkdir(filepath.Join(dir, "a-directory"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"a missing --config file", nil, []string{"--config", filepath.Join(dir, "missing.yaml")},
			"simba: config file: " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
		{"a missing $SIMBA_CONFIG file", map[string]string{envConfig: filepath.Join(dir, "missing.yaml")}, nil,
			"simba: config file: " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
		{"an unreadable config file", nil, []string{"--config", filepath.Join(dir, "a-directory")},
			"simba: config file: " + filepath.Join(dir, "a-directory") + ": is a directory"},
		{"an unknown key", nil, []string{"--config", unknown},
			"simba: " + unknown + `:3: unknown key "endpionts" (known: backend, endpoints,`},
		{"bad YAML", nil, []string{"--config", badYAML},
			"simba: " + badYAML + ":"},
		{"a password in the file", nil, []string{"--config", secret},
			"simba: " + secret + ":4: password: a config file holds no secrets: use password-file (a file holding it) or $SIMBA_PASSWORD"},
		{"an unknown backend", nil, []string{"--config", badBackend},
			"simba: " + badBackend + `:1: backend "consul": want etcd, zookeeper, postgres, mysql or kubernetes`},
		{"a bad timeout", nil, []string{"--config", badTimeout},
			"simba: " + badTimeout + `:3: timeout "soon": want a positive duration`},
		{"endpoints without a backend", nil, []string{"--config", noBackend},
			"simba: " + noBackend + ":1: endpoints without a backend"},
		{"a value of the wrong type", nil, []string{"--config", wrongType},
			"simba: " + wrongType + ":3: cannot unmarshal !!str `maybe` into bool"},
		{"two documents", nil, []string{"--config", twoDocs},
			"simba: " + twoDocs + ": more than one YAML document"},
		{"a missing password file", nil, []string{"--config", noPasswordFile},
			"simba: password of app from config file " + noPasswordFile + " (password-file): " + filepath.Join(dir, "missing-password") + ": no such file or directory"},
		{"a bad $SIMBA_TIMEOUT", map[string]string{envEtcd: "e:1", envTimeout: "-1s"}, nil,
			`simba: $SIMBA_TIMEOUT="-1s": want a positive duration`},
		{"a bad $SIMBA_INSECURE_SKIP_TLS_VERIFY", map[string]string{envEtcd: "e:1", envInsecure: "perhaps"}, nil,
			`simba: $SIMBA_INSECURE_SKIP_TLS_VERIFY="perhaps": want true or false`},
		{"a missing $SIMBA_CACERT", map[string]string{envEtcd: "e:1", envCACert: filepath.Join(dir, "missing.crt")}, nil,
			"simba: CA certificates from $SIMBA_CACERT: " + filepath.Join(dir, "missing.crt") + ": no such file or directory"},
		{"bad ZooKeeper credentials", map[string]string{envZK: "z:1"}, []string{"--zk-auth", "no-colon"},
			"simba: ZooKeeper credentials from --zk-auth: want user:password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, b)
			h.env = tc.env
			if h.env == nil {
				h.env = map[string]string{}
			}
			r := h.run(append([]string{"elections"}, tc.args...)...)
			if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("want exit %d and one line starting %q\n%v", exitUsage, tc.want, r)
			}
			if strings.Contains(r.stderr, "hunter2") {
				t.Errorf("the password is printed: %v", r)
			}
			if len(h.opened) > 0 {
				t.Errorf("opened %v", h.opened)
			}
		})
	}
}

// The connection flags of one backend are refused for the other.
func TestCredentialsOfTheOtherBackend(t *testing.T) {
	b := memory.New()
	defer b.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--zk", "z:1", "--user", "u:p"}, "--user and --password are for etcd"},
		{[]string{"--etcd", "e:1", "--zk-auth", "u:p"}, "--zk-auth is for ZooKeeper"},
	} {
		h := newHarness(t, b)
		h.env = map[string]string{}
		r := h.run(append([]string{"jobs"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "u:p") {
			t.Errorf("simba jobs %v: %v", tc.args, r)
		}
	}
}
