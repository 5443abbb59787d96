// Package certs generates the X.509 certificates of a small private PKI: a
// certificate authority, server certificates for 127.0.0.1 and localhost,
// client certificates, and expired ones. simba dev --tls serves its
// embedded etcd with them, and the tests of TLS connections use them; one
// place makes them, so that both agree.
//
// Keys are ECDSA P-256, written as PKCS #8 ("PRIVATE KEY"), which both Go
// and ZooKeeper's PEM key store read. The certificates are for trying
// things out and for tests, not for production: their authority's key is
// kept beside them.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// DefaultValidity is how long the certificates are valid when their
// template does not say: a year from an hour ago (the hour allows for
// clocks a little apart).
const DefaultValidity = 365 * 24 * time.Hour

// Pair is a certificate and its private key, parsed and in PEM.
type Pair struct {
	// Cert is the parsed certificate.
	Cert *x509.Certificate
	// CertPEM and KeyPEM are the certificate and the PKCS #8 key in PEM.
	CertPEM, KeyPEM []byte

	key *ecdsa.PrivateKey
}

// TLS returns the pair as a certificate for a tls.Config.
func (p *Pair) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.key, Leaf: p.Cert}
}

// Write writes the certificate to dir/name.crt (mode 0644) and the key to
// dir/name.key (mode 0600), and returns their paths.
func (p *Pair) Write(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, p.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// CA is a certificate authority that issues certificates.
type CA struct {
	Pair
}

// NewCA returns a new self-signed certificate authority named name, valid
// for [DefaultValidity].
func NewCA(name string) (*CA, error) {
	now := time.Now()
	p, err := issue(nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name, Organization: []string{"simba"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(DefaultValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	})
	if err != nil {
		return nil, err
	}
	return &CA{Pair: *p}, nil
}

// Pool returns a certificate pool holding the authority alone.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// Template says what to issue. The zero value is a client certificate
// without a name, valid for [DefaultValidity].
type Template struct {
	// CommonName is the subject's common name: for a client certificate,
	// the user that etcd's --client-cert-auth takes it for.
	CommonName string
	// Hosts are the DNS names and IP addresses of a server certificate.
	// With Hosts, the certificate is for servers and clients alike (etcd's
	// members present theirs as clients too).
	Hosts []string
	// NotBefore and NotAfter bound the validity; zero values mean an hour
	// ago and DefaultValidity from now.
	NotBefore, NotAfter time.Time
}

// Issue issues a certificate by t, signed by ca.
func (ca *CA) Issue(t Template) (*Pair, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: t.CommonName, Organization: []string{"simba"}},
		NotBefore:   t.NotBefore,
		NotAfter:    t.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(DefaultValidity)
	}
	if !tmpl.NotAfter.After(tmpl.NotBefore) {
		return nil, fmt.Errorf("certs: %q: NotAfter %v is not after NotBefore %v", t.CommonName, tmpl.NotAfter, tmpl.NotBefore)
	}
	if len(t.Hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range t.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	return issue(ca, tmpl)
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server() (*Pair, error) {
	return ca.Issue(Template{CommonName: "localhost", Hosts: []string{"127.0.0.1", "::1", "localhost"}})
}

// Client issues a client certificate for the user named.
func (ca *CA) Client(user string) (*Pair, error) { return ca.Issue(Template{CommonName: user}) }

// Expired issues a certificate like t's that expired an hour ago.
func (ca *CA) Expired(t Template) (*Pair, error) {
	now := time.Now()
	t.NotBefore, t.NotAfter = now.Add(-48*time.Hour), now.Add(-time.Hour)
	return ca.Issue(t)
}

// issue creates a key and a certificate from tmpl, signed by ca, or
// self-signed when ca is nil.
func issue(ca *CA, tmpl *x509.Certificate) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generating a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("certs: generating a serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.Cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("certs: creating the certificate of %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return &Pair{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		key:     key,
	}, nil
}

// Files are the PEM files of a CA, a server and a client, as [Generate]
// writes them.
type Files struct {
	// Authority is the CA, for issuing more certificates (its key is not
	// written).
	Authority *CA

	Dir                   string
	CA                    string // the authority's certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// Generate makes a CA, a server certificate for 127.0.0.1, ::1 and
// localhost, and a client certificate for user, and writes them to dir
// (created with mode 0700 if missing) as ca.crt, server.crt, server.key,
// client.crt and client.key; the authority's key is not written. Files
// there already are replaced.
func Generate(dir, user string) (Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, err
	}
	ca, err := NewCA("simba CA")
	if err != nil {
		return Files{}, err
	}
	srv, err := ca.Server()
	if err != nil {
		return Files{}, err
	}
	cli, err := ca.Client(user)
	if err != nil {
		return Files{}, err
	}
	f := Files{Authority: ca, Dir: dir, CA: filepath.Join(dir, "ca.crt")}
	if err := os.WriteFile(f.CA, ca.CertPEM, 0o644); err != nil {
		return Files{}, err
	}
	if f.ServerCert, f.ServerKey, err = srv.Write(dir, "server"); err != nil {
		return Files{}, err
	}
	if f.ClientCert, f.ClientKey, err = cli.Write(dir, "client"); err != nil {
		return Files{}, err
	}
	return f, nil
}
