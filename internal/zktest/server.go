package zktest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/sigstop"

	"github.com/simba-go/simba/internal/servers"
)

// Config is the server configuration shared with scripts/with-zookeeper.sh:
// short ticks so that sessions of about a second are allowed (the granted
// timeout is clamped to 2–20 ticks: 400ms to 4s) and expire promptly, and
// no limit on connections from one address (the default, 60, is soon
// reached when every test client connects from 127.0.0.1).
const Config = `tickTime=200
minSessionTimeout=400
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
`

// jvmFlags are the Java options a test's server runs with, chosen for
// its start-up time: a small heap, the serial collector, and the C1
// compiler only (scripts/with-zookeeper.sh starts its server so too).
var jvmFlags = []string{"-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}

// DeployedJVM are the Java options of a server run as operators run it:
// Debian's package passes none (the JVM's defaults: tiered compilation up
// to C2, the G1 collector), and upstream's zkServer.sh a heap of 1000 MB.
// Benchmarks that compare hand-off times use them (see
// [StartDeployedServer]).
var DeployedJVM = []string{"-Xmx1000m"}

// serverProperties are the system properties every server runs with: no
// admin server, and empty container znodes deleted every second instead
// of every minute.
var serverProperties = []string{
	"-Dzookeeper.admin.enableServer=false",
	"-Dznode.container.checkIntervalMs=1000",
}

// Server is a standalone ZooKeeper server of one test's own, on 127.0.0.1.
type Server struct {
	// Addr is the server's address, host:port. It stays the same across
	// Stop and Start.
	Addr string
	// SecureAddr is the address of the server's TLS port (its
	// secureClientPort), host:port, for a server [StartTLSServer] started;
	// "" otherwise. It stays the same across Stop and Start.
	SecureAddr string

	t       testing.TB
	java    string
	cp      string
	flags   []string // the JVM's options: jvmFlags when nil
	jvm     []string // Java options after the JVM's
	main    string   // the main class; standalone when ""
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
	logFile string
}

// Installation returns the java command and the class path of an installed
// ZooKeeper (Debian's zookeeper package, or $ZOOKEEPER_HOME), or an error
// saying what is missing.
func Installation() (java, classpath string, err error) {
	java, err = exec.LookPath("java")
	if err != nil {
		return "", "", fmt.Errorf("no java command: %w", err)
	}
	if cp := os.Getenv("SIMBA_ZK_CLASSPATH"); cp != "" {
		return java, cp, nil
	}
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err == nil {
		return java, "/usr/share/java/zookeeper.jar", nil // its manifest names its dependencies
	}
	if home := os.Getenv("ZOOKEEPER_HOME"); home != "" {
		jars, _ := filepath.Glob(filepath.Join(home, "lib", "*.jar"))
		main, _ := filepath.Glob(filepath.Join(home, "zookeeper-*.jar"))
		if jars = append(jars, main...); len(jars) > 0 {
			return java, strings.Join(jars, ":"), nil
		}
	}
	return "", "", fmt.Errorf("ZooKeeper is not installed (no /usr/share/java/zookeeper.jar, no $ZOOKEEPER_HOME)")
}

// StartServer starts a standalone server with [Config], then the extra
// configuration lines given (such as "forceSync=no"), and a data directory
// of its own on a free port, and waits until it serves. It is stopped when
// the test ends. Without an installed ZooKeeper it skips the test (fails it
// under SIMBA_REQUIRE_SERVERS=1).
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startServer(t, nil, extra)
}

// StartDeployedServer is [StartServer] for a server whose JVM runs as
// deployed ([DeployedJVM]) instead of with the tests' options, which
// favour start-up time over the speed of the code it runs: for
// benchmarks. It starts in a few seconds more.
func StartDeployedServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startServer(t, DeployedJVM, extra)
}

// startServer is StartServer with the JVM's options flags (jvmFlags when
// nil).
func startServer(t testing.TB, flags, extra []string) *Server {
	t.Helper()
	s := newServer(t)
	s.flags = flags
	s.configure(extra)
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// newServer prepares a server of the test's own on a free port, with a
// directory of its own; it skips the test (fails it under
// SIMBA_REQUIRE_SERVERS=1) without an installed ZooKeeper.
func newServer(t testing.TB) *Server {
	t.Helper()
	java, cp, err := Installation()
	if err != nil {
		Unavailable(t, "cannot start a ZooKeeper server of the test's own: %v", err)
	}
	dir := t.TempDir()
	return &Server{Addr: freeAddr(t), t: t, java: java, cp: cp, dir: dir, logFile: filepath.Join(dir, "server.log")}
}

// freeAddr returns 127.0.0.1 and a port that was free a moment ago,
// below the kernel's ephemeral range (servers.FreePort): a server
// restarts on its port.
func freeAddr(t testing.TB) string {
	t.Helper()
	a, err := servers.FreeAddr()
	if err != nil {
		t.Fatalf("zktest: finding a free port: %v", err)
	}
	return a
}

// configure writes the server's zoo.cfg: [Config], its data directory and
// port, then the extra lines.
func (s *Server) configure(extra []string) {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	cfg := Config + fmt.Sprintf("dataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\n", filepath.Join(s.dir, "data"), port)
	for _, line := range extra {
		cfg += line + "\n"
	}
	if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		s.t.Fatalf("zktest: %v", err)
	}
}

// Log returns what the server has written to its log so far (for a
// server [StartTLSServer] started, its warnings and errors, such as the
// reason it refused a TLS handshake), for failure messages.
func (s *Server) Log() string {
	data, err := os.ReadFile(s.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(data)
}

// Start starts the server again after Stop or Kill, on the same port and
// data directory, and waits until it serves (a member of an [Ensemble]:
// until it has joined a quorum).
func (s *Server) Start() {
	s.t.Helper()
	s.launch()
	s.await()
}

// standaloneMain is the main class of a standalone server.
const standaloneMain = "org.apache.zookeeper.server.ZooKeeperServerMain"

// launch starts the server's process.
func (s *Server) launch() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatalf("zktest: server %s already running", s.Addr)
	}
	out, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("zktest: %v", err)
	}
	defer out.Close()
	main := s.main
	if main == "" {
		main = standaloneMain
	}
	flags := s.flags
	if flags == nil {
		flags = jvmFlags
	}
	args := slices.Concat(flags, serverProperties, s.jvm, []string{"-cp", s.cp, main, filepath.Join(s.dir, "zoo.cfg")})
	cmd := exec.Command(s.java, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("zktest: starting ZooKeeper: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
}

// await waits until the launched server serves.
func (s *Server) await() {
	s.t.Helper()
	if err := s.awaitErr(); err != nil {
		s.t.Fatal(err)
	}
}

// awaitErr waits until the launched server serves, or returns an error
// when it exits first or does not serve within 30 s (it is then killed).
func (s *Server) awaitErr() error {
	exited := s.exited
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.serving() {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(s.logFile)
			s.cmd = nil
			return fmt.Errorf("zktest: ZooKeeper on %s exited while starting:\n%s", s.Addr, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("zktest: ZooKeeper on %s not serving after 30s", s.Addr)
		}
	}
}

// serving reports whether the server serves: srvr reports its mode, and
// its TLS port, if any, accepts connections (it opens after the plain one).
func (s *Server) serving() bool {
	if reply, err := FourLetter(s.Addr, "srvr"); err != nil || !strings.Contains(reply, "Mode:") {
		return false
	}
	if s.SecureAddr == "" {
		return true
	}
	c, err := net.DialTimeout("tcp", s.SecureAddr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Pause stops the server's process with SIGSTOP, as a machine that hangs:
// its connections stay open and nothing is answered until Resume. Its
// clock goes on, so sessions whose timeout passes meanwhile expire when it
// resumes.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a server paused by Pause (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatalf("zktest: server %s is not running", s.Addr)
	}
	if err := sigstop.Signal(s.cmd.Process, sig); err != nil { // SIGSTOP: once it is stopped
		s.t.Fatalf("zktest: signalling ZooKeeper on %s: %v", s.Addr, err)
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s) and waits for it
// to exit, paused or not. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

// Kill kills the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	s.cmd.Process.Signal(syscall.SIGCONT) // a paused server handles its SIGTERM
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// FourLetter sends a four-letter command ("srvr", "ruok") to the server at
// addr and returns its answer.
func FourLetter(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var sb strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		sb.WriteString(sc.Text())
		sb.WriteByte('\n')
	}
	return sb.String(), sc.Err()
}
