package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"

	"github.com/simba-go/simba/internal/certs"
)

// handshake runs a TLS handshake between a server presenting srv, which
// asks for client certificates signed by ca, and a client trusting ca and
// presenting cli (nil: none), and returns the client's and the server's
// errors.
func handshake(t *testing.T, ca *certs.CA, srv, cli *certs.Pair) (clientErr, serverErr error) {
	t.Helper()
	a, b := net.Pipe()
	server := tls.Server(a, &tls.Config{
		Certificates: []tls.Certificate{srv.TLS()},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	})
	ccfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if cli != nil {
		ccfg.Certificates = []tls.Certificate{cli.TLS()}
	}
	client := tls.Client(b, ccfg)
	done := make(chan error, 1)
	go func() {
		err := server.Handshake()
		server.Close()
		done <- err
	}()
	clientErr = client.Handshake()
	if clientErr == nil {
		_, clientErr = client.Read(make([]byte, 1)) // the server's alert, in TLS 1.3
	}
	client.Close()
	return clientErr, <-done
}

func TestCertificates(t *testing.T) {
	ca, err := certs.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.Client("alice")
	if err != nil {
		t.Fatal(err)
	}
	if cli.Cert.Subject.CommonName != "alice" || !ca.Cert.IsCA {
		t.Errorf("client %v, CA %v", cli.Cert.Subject, ca.Cert.IsCA)
	}
	if _, serverErr := handshake(t, ca, srv, cli); serverErr != nil {
		t.Errorf("handshake with valid certificates: %v", serverErr)
	}

	expired, err := ca.Expired(certs.Template{CommonName: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var invalid x509.CertificateInvalidError
	if _, serverErr := handshake(t, ca, srv, expired); !errors.As(serverErr, &invalid) || invalid.Reason != x509.Expired {
		t.Errorf("server's error with an expired client certificate: %v", serverErr)
	}
	if clientErr, _ := handshake(t, ca, srv, nil); clientErr == nil {
		t.Errorf("no client certificate: no error")
	}

	other, err := certs.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Server()
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if clientErr, _ := handshake(t, ca, foreign, cli); !errors.As(clientErr, &unknown) {
		t.Errorf("client's error with a server of another CA: %v", clientErr)
	}

	f, err := certs.Generate(t.TempDir(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey); err != nil {
		t.Errorf("server files: %v", err)
	}
	if _, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey); err != nil {
		t.Errorf("client files: %v", err)
	}
}
