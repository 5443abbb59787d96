package zktest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/simba-go/simba/internal/certs"
)

// ClientAuth is what a TLS server asks of its clients' certificates: its
// ssl.clientAuth setting.
type ClientAuth string

// The settings of ssl.clientAuth.
const (
	// ClientCertNone asks for no client certificate: the server proves
	// who it is, the clients do not.
	ClientCertNone ClientAuth = "none"
	// ClientCertWant verifies a client certificate when one is given and
	// accepts clients without one.
	ClientCertWant ClientAuth = "want"
	// ClientCertNeed refuses the handshake of a client without a valid
	// certificate signed by the server's CA (ZooKeeper's default).
	ClientCertNeed ClientAuth = "need"
)

// TLSConfig returns the configuration lines that make a server serve TLS
// on port (its secureClientPort, on 127.0.0.1) with the key store
// keyStore (a PEM file holding the server's key and certificate) and the
// CA certificates of caFile as its trust store, asking clients for
// certificates as auth says. It is what [StartTLSServer] adds to [Config],
// and what docs/OPERATING.md shows.
func TLSConfig(port, keyStore, caFile string, auth ClientAuth) []string {
	return []string{
		"secureClientPort=" + port,
		"secureClientPortAddress=127.0.0.1",
		// The default connection factory (NIO) serves no TLS.
		"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
		"ssl.keyStore.location=" + keyStore,
		"ssl.keyStore.type=PEM",
		"ssl.trustStore.location=" + caFile,
		"ssl.trustStore.type=PEM",
		"ssl.clientAuth=" + string(auth),
	}
}

// tlsJars are the jars, in Debian's /usr/share/java, that a server
// serving TLS needs beyond those zookeeper.jar's manifest names: netty's
// codec (without it the server drops every TLS connection, with
// NoClassDefFoundError: io/netty/handler/codec/ByteToMessageDecoder), and
// a logger, so that the server's log says why it refused a handshake.
var tlsJars = []struct {
	name     string
	required bool
}{
	{"netty-codec.jar", true},
	{"slf4j-simple.jar", false},
}

// StartTLSServer is [StartServer] for a server that also serves TLS on a
// port of its own ([Server.SecureAddr]), with the server certificate and
// key of f, trusting client certificates signed by f's CA as auth says;
// [Server.Addr] stays a plain port, for inspecting the server (Connect,
// Root) and for tests of a client that speaks TLS to it. Its log
// ([Server.Log]) has the server's warnings and errors. Without an
// installed ZooKeeper it skips the test (fails it under
// SIMBA_REQUIRE_SERVERS=1); an installed one that cannot serve TLS fails
// it, saying what is missing.
func StartTLSServer(t testing.TB, f certs.Files, auth ClientAuth, extra ...string) *Server {
	t.Helper()
	s := newServer(t)
	cp, err := tlsClasspath(s.cp)
	if err != nil {
		t.Fatalf("zktest: ZooKeeper cannot serve TLS here: %v", err)
	}
	s.cp = cp
	s.SecureAddr = freeAddr(t)
	for s.SecureAddr == s.Addr {
		s.SecureAddr = freeAddr(t)
	}
	// ZooKeeper's PEM key store is one file: the key and its certificate.
	key, err := os.ReadFile(f.ServerKey)
	if err != nil {
		t.Fatalf("zktest: the server's key: %v", err)
	}
	cert, err := os.ReadFile(f.ServerCert)
	if err != nil {
		t.Fatalf("zktest: the server's certificate: %v", err)
	}
	keyStore := filepath.Join(s.dir, "keystore.pem")
	if err := os.WriteFile(keyStore, append(key, cert...), 0o600); err != nil {
		t.Fatalf("zktest: %v", err)
	}
	s.jvm = []string{"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"}
	_, port, _ := net.SplitHostPort(s.SecureAddr)
	s.configure(append(TLSConfig(port, keyStore, f.CA, auth), extra...))
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// tlsClasspath returns cp with the jars of tlsJars that Debian's
// installation lacks on it; other installations ($ZOOKEEPER_HOME's lib,
// $SIMBA_ZK_CLASSPATH) are taken as they are.
func tlsClasspath(cp string) (string, error) {
	const debian = "/usr/share/java/zookeeper.jar"
	if cp != debian {
		return cp, nil
	}
	for _, j := range tlsJars {
		path := filepath.Join(filepath.Dir(debian), j.name)
		if _, err := os.Stat(path); err != nil {
			if j.required {
				return "", fmt.Errorf("its TLS port needs %s (Debian's libnetty-java): %w", path, err)
			}
			continue
		}
		cp += ":" + path
	}
	return cp, nil
}
