package security

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/gitops/gittest"
	"github.com/converge-dev/converge/internal/testenv"
)

// etcdKV is a client of etcd's JSON gateway (/v3/kv/...), the API any local
// process could use if etcd let it in.
type etcdKV struct {
	url    string
	client *http.Client
}

// call POSTs req to /v3/kv/<op> and returns the status code and body.
func (e etcdKV) call(op string, req map[string]any) (int, []byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	resp, err := e.client.Post(e.url+"/v3/kv/"+op, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out, err
}

// count returns how many keys start with prefix.
func (e etcdKV) count(prefix string) (int, error) {
	end := []byte(prefix)
	end[len(end)-1]++
	code, body, err := e.call("range", map[string]any{"key": b64(prefix), "range_end": b64(string(end)), "count_only": true})
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("range answered %d: %s", code, body)
	}
	var r struct {
		Count string `json:"count"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, err
	}
	if r.Count == "" {
		return 0, nil
	}
	return strconv.Atoi(r.Count)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func tlsClient(c *tls.Config) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c, DisableKeepAlives: true}}
}

// foreignClientCert is a client certificate from a CA etcd does not trust,
// with the name of the API server's etcd client certificate.
func foreignClientCert(t *testing.T) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "attacker-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver-etcd-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestEtcdRefusesClientsWithoutItsCertificate is a local user reaching for
// etcd's client and peer ports: over plain HTTP, over TLS without a client
// certificate, with a certificate from another CA, and with the cluster CA's
// admin certificate (system:masters on the API server, nothing on etcd). Each
// tries to write a key and to count the Secrets; each fails, and the key
// does not exist afterwards. The API server's own etcd client certificate
// still works, so the test would notice an etcd that refuses everyone.
func TestEtcdRefusesClientsWithoutItsCertificate(t *testing.T) {
	testenv.Need(t, env)
	cp := env.ControlPlane
	right, err := cp.EtcdClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	roots := right.RootCAs
	admin, err := tls.X509KeyPair(env.Config.CertData, env.Config.KeyData)
	if err != nil {
		t.Fatalf("loading the admin certificate: %v", err)
	}
	key := "/converge-attack/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	plainURL := "http://" + strings.TrimPrefix(cp.EtcdURL(), "https://")

	attacks := []struct {
		name string
		kv   etcdKV
	}{
		{"plain http on the client port", etcdKV{plainURL, &http.Client{Timeout: 5 * time.Second}}},
		{"TLS without a client certificate", etcdKV{cp.EtcdURL(), tlsClient(&tls.Config{RootCAs: roots})}},
		{"TLS without verifying etcd, without a client certificate",
			etcdKV{cp.EtcdURL(), tlsClient(&tls.Config{InsecureSkipVerify: true})}},
		{"a client certificate from another CA",
			etcdKV{cp.EtcdURL(), tlsClient(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{foreignClientCert(t)}})}},
		{"the cluster CA's admin certificate",
			etcdKV{cp.EtcdURL(), tlsClient(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{admin}})}},
		{"the peer port without a client certificate", etcdKV{cp.EtcdPeerURL(), tlsClient(&tls.Config{RootCAs: roots})}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			g := NewWithT(t)
			code, body, err := a.kv.call("put", map[string]any{"key": b64(key), "value": b64("pwned")})
			g.Expect(err != nil || code != http.StatusOK).To(BeTrue(), "the write was accepted: %d %s", code, body)
			code, body, err = a.kv.call("range", map[string]any{"key": b64("/registry/secrets/"),
				"range_end": b64("/registry/secrets0"), "count_only": true})
			g.Expect(err != nil || code != http.StatusOK).To(BeTrue(), "the read was answered: %d %s", code, body)
			for _, path := range []string{"/metrics", "/health", "/version"} {
				resp, err := a.kv.client.Get(a.kv.url + path)
				if err == nil {
					_ = resp.Body.Close()
					g.Expect(resp.StatusCode).NotTo(Equal(http.StatusOK), "%s answered", path)
				}
			}
		})
	}

	t.Run("nothing changed, and the right certificate works", func(t *testing.T) {
		g := NewWithT(t)
		kv := etcdKV{cp.EtcdURL(), tlsClient(right)}
		n, err := kv.count(key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeZero(), "an attacker's key was written")
		n, err = kv.count("/registry/namespaces/")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n).To(BeNumerically(">", 0), "the API server's etcd client certificate reads etcd")
	})
}

// TestDataDirIsPrivate walks the data directory of the running control plane
// (started by up.Start) and checks that no other local user can read or list
// anything the control plane keeps there: etcd's data, the PKI, the
// kubeconfig, the webhook certificate, the logs, and the GitOps artifact
// store. A tenant's repository with a nested directory and an executable
// script is fetched first, so the walk meets a stored checkout: git's own
// modes (0755, 0644) must not survive into it.
func TestDataDirIsPrivate(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	tn := newTenant(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "app")
	repo.Commit(t, "initial", map[string]string{"deploy/nested/app.yaml": configMap("", "app", nil)})
	script := filepath.Join(repo.Work(), "hack", "run.sh")
	g.Expect(os.MkdirAll(filepath.Dir(script), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)).To(Succeed())
	repo.CommitWork(t, "a script")
	gr := &gitopsv1alpha1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: tn.NS, Name: "app"},
		Spec: gitopsv1alpha1.GitRepositorySpec{URL: srv.ServeDaemon(t) + "app.git", Interval: &metav1.Duration{Duration: time.Hour}}}
	g.Expect(tn.Client.Create(t.Context(), gr)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		got := &gitopsv1alpha1.GitRepository{}
		g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(gr), got)).To(Succeed())
		g.Expect(got.Status.Artifact).NotTo(BeNil(), "the artifact is stored")
	}).Should(Succeed())

	dir := env.ControlPlane.DataDir()
	seen := map[string]bool{}
	var stored []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		top := strings.Split(rel, string(filepath.Separator))[0]
		seen[top] = true
		if top == "gitops" && d.Type().IsRegular() {
			stored = append(stored, filepath.Base(rel))
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o700)), "directory %s", rel)
		case d.Type().IsRegular():
			g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), "file %s", rel)
		}
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	for _, want := range []string{".", "etcd", "pki", "logs", "webhook", "kubeconfig", "gitops"} {
		g.Expect(seen).To(HaveKey(want), "the walk covered %s", want)
	}
	g.Expect(stored).To(ContainElements("app.yaml", "run.sh"), "the walk met the stored checkout")
}
