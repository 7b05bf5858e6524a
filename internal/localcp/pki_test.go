package localcp

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
)

var pkiFiles = []string{caCertFile, caKeyFile, servingCertFile, servingKeyFile, adminCertFile, adminKeyFile, saKeyFile, saPubFile,
	etcdCACertFile, etcdCAKeyFile, etcdServerCertFile, etcdServerKeyFile, etcdClientCertFile, etcdClientKeyFile}

func readPKIFiles(t *testing.T, p pki) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range pkiFiles {
		data, err := os.ReadFile(p.path(f))
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		out[f] = data
	}
	return out
}

func parsePKICert(t *testing.T, p pki, name string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(p.path(name))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s is not a PEM certificate", name)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPKIEnsureCreatesEverything(t *testing.T) {
	g := NewWithT(t)
	p := pki{dir: filepath.Join(t.TempDir(), "pki")}
	g.Expect(p.ensure()).To(Succeed())

	fi, err := os.Stat(p.dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o700)))
	for f, data := range readPKIFiles(t, p) {
		g.Expect(data).NotTo(BeEmpty(), f)
	}
	for _, f := range pkiFiles {
		fi, err := os.Stat(p.path(f))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), "%s must be private", f)
	}
	entries, err := os.ReadDir(p.dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(len(pkiFiles)), "no temporary files left behind")

	ca := parsePKICert(t, p, caCertFile)
	g.Expect(ca.IsCA).To(BeTrue())
	g.Expect(ca.NotAfter).To(BeTemporally(">", time.Now().Add(9*365*24*time.Hour)))

	// The service-account key pair matches.
	_, saKey, err := loadPair(p.path(caCertFile), p.path(saKeyFile))
	g.Expect(err).NotTo(HaveOccurred())
	pubPEM, err := os.ReadFile(p.path(saPubFile))
	g.Expect(err).NotTo(HaveOccurred())
	blk, _ := pem.Decode(pubPEM)
	g.Expect(blk).NotTo(BeNil())
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(saKey.Public()).To(Equal(pub))
}

func TestPKIEnsureIsStableAcrossRestarts(t *testing.T) {
	g := NewWithT(t)
	p := pki{dir: filepath.Join(t.TempDir(), "pki")}
	g.Expect(p.ensure()).To(Succeed())
	first := readPKIFiles(t, p)

	g.Expect(p.ensure()).To(Succeed())
	second := readPKIFiles(t, p)
	for _, f := range pkiFiles {
		g.Expect(second[f]).To(Equal(first[f]), "%s changed on restart", f)
	}
}

func TestPKIEnsureRenewsLeavesButKeepsCA(t *testing.T) {
	g := NewWithT(t)
	p := pki{dir: filepath.Join(t.TempDir(), "pki")}
	g.Expect(p.ensure()).To(Succeed())
	first := readPKIFiles(t, p)

	// Replace the admin certificate with one that expires within the renewal
	// window, and the serving certificate with one from another CA.
	ca, caKey, err := loadPair(p.path(caCertFile), p.path(caKeyFile))
	g.Expect(err).NotTo(HaveOccurred())
	_, adminKey, err := loadPair(p.path(adminCertFile), p.path(adminKeyFile))
	g.Expect(err).NotTo(HaveOccurred())
	expiring, err := sign(&x509.Certificate{Subject: pkix.Name{CommonName: adminUser}}, adminKey.Public(), ca, caKey, 24*time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writePair(p.path(adminCertFile), p.path(adminKeyFile), expiring, adminKey)).To(Succeed())

	other := pki{dir: filepath.Join(t.TempDir(), "other")}
	g.Expect(other.ensure()).To(Succeed())
	for _, f := range []string{servingCertFile, servingKeyFile} {
		data, err := os.ReadFile(other.path(f))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(os.WriteFile(p.path(f), data, 0o600)).To(Succeed())
	}

	g.Expect(p.ensure()).To(Succeed())
	after := readPKIFiles(t, p)
	for _, f := range []string{caCertFile, caKeyFile, saKeyFile, saPubFile} {
		g.Expect(after[f]).To(Equal(first[f]), "%s must never change", f)
	}
	admin := parsePKICert(t, p, adminCertFile)
	g.Expect(admin.NotAfter).To(BeTemporally(">", time.Now().Add(300*24*time.Hour)), "the expiring admin certificate is renewed")
	g.Expect(admin.CheckSignatureFrom(ca)).To(Succeed())
	g.Expect(admin.Subject.Organization).To(ContainElement("system:masters"))
	serving := parsePKICert(t, p, servingCertFile)
	g.Expect(serving.CheckSignatureFrom(ca)).To(Succeed(), "a serving certificate from another CA is replaced")
}

func TestPKICertificates(t *testing.T) {
	p := pki{dir: filepath.Join(t.TempDir(), "pki")}
	if err := p.ensure(); err != nil {
		t.Fatal(err)
	}
	ca := parsePKICert(t, p, caCertFile)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	t.Run("apiserver", func(t *testing.T) {
		serving := parsePKICert(t, p, servingCertFile)
		for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc", "kubernetes", "::1", serviceAPIIP} {
			t.Run(host, func(t *testing.T) {
				_, err := serving.Verify(x509.VerifyOptions{DNSName: host, Roots: roots,
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
			})
		}
		t.Run("other host", func(t *testing.T) {
			_, err := serving.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots})
			NewWithT(t).Expect(err).To(HaveOccurred())
		})
		t.Run("untrusted by another CA", func(t *testing.T) {
			other := pki{dir: filepath.Join(t.TempDir(), "other")}
			NewWithT(t).Expect(other.ensure()).To(Succeed())
			otherRoots := x509.NewCertPool()
			otherRoots.AddCert(parsePKICert(t, other, caCertFile))
			_, err := serving.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: otherRoots})
			NewWithT(t).Expect(err).To(HaveOccurred())
		})
	})

	t.Run("admin", func(t *testing.T) {
		g := NewWithT(t)
		admin := parsePKICert(t, p, adminCertFile)
		g.Expect(admin.Subject.CommonName).To(Equal(adminUser))
		g.Expect(admin.Subject.Organization).To(ConsistOf("system:masters"))
		g.Expect(admin.ExtKeyUsage).To(ContainElement(x509.ExtKeyUsageClientAuth))
		_, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		g.Expect(err).NotTo(HaveOccurred())
		// The admin certificate cannot serve.
		_, err = admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		g.Expect(err).To(HaveOccurred())
	})
}

// TestPKIEtcd checks etcd's own CA: its certificates chain to it and not to
// the cluster CA, and the cluster CA's certificates (the admin's, anything
// the API server signs) do not chain to it, so they cannot open etcd.
func TestPKIEtcd(t *testing.T) {
	g := NewWithT(t)
	p := pki{dir: filepath.Join(t.TempDir(), "pki")}
	g.Expect(p.ensure()).To(Succeed())
	pool := func(name string) *x509.CertPool {
		roots := x509.NewCertPool()
		roots.AddCert(parsePKICert(t, p, name))
		return roots
	}
	etcdRoots, clusterRoots := pool(etcdCACertFile), pool(caCertFile)
	g.Expect(parsePKICert(t, p, etcdCACertFile).Equal(parsePKICert(t, p, caCertFile))).To(BeFalse())

	server := parsePKICert(t, p, etcdServerCertFile)
	for _, host := range []string{"127.0.0.1", "localhost", "::1"} {
		_, err := server.Verify(x509.VerifyOptions{DNSName: host, Roots: etcdRoots,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		g.Expect(err).NotTo(HaveOccurred(), host)
	}
	// Peers present the serving certificate as their client certificate.
	_, err := server.Verify(x509.VerifyOptions{Roots: etcdRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).NotTo(HaveOccurred())

	client := parsePKICert(t, p, etcdClientCertFile)
	g.Expect(client.Subject.CommonName).To(Equal(etcdClientCommonName))
	_, err = client.Verify(x509.VerifyOptions{Roots: etcdRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = client.Verify(x509.VerifyOptions{Roots: etcdRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	g.Expect(err).To(HaveOccurred(), "the client certificate cannot serve")

	for _, f := range []string{etcdServerCertFile, etcdClientCertFile} {
		_, err := parsePKICert(t, p, f).Verify(x509.VerifyOptions{Roots: clusterRoots,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		g.Expect(err).To(HaveOccurred(), "%s must not chain to the cluster CA", f)
	}
	_, err = parsePKICert(t, p, adminCertFile).Verify(x509.VerifyOptions{Roots: etcdRoots,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).To(HaveOccurred(), "the admin certificate must not open etcd")
}

// TestPKIUpgradeFromDataDirWithoutEtcdCerts starts from the PKI an older
// converge wrote (no etcd CA, certificates 0644): the etcd files are added,
// every file is made private, and nothing that existed changes.
func TestPKIUpgradeFromDataDirWithoutEtcdCerts(t *testing.T) {
	g := NewWithT(t)
	p := pki{dir: filepath.Join(t.TempDir(), "pki")}
	g.Expect(p.ensure()).To(Succeed())
	old := map[string][]byte{}
	for _, f := range pkiFiles {
		if strings.HasPrefix(f, "etcd-") || strings.Contains(f, "etcd-client") {
			g.Expect(os.Remove(p.path(f))).To(Succeed())
			continue
		}
		g.Expect(os.Chmod(p.path(f), 0o644)).To(Succeed())
		data, err := os.ReadFile(p.path(f))
		g.Expect(err).NotTo(HaveOccurred())
		old[f] = data
	}
	g.Expect(os.Chmod(p.dir, 0o755)).To(Succeed())
	g.Expect(old).To(HaveLen(8))

	g.Expect(p.ensure()).To(Succeed())
	after := readPKIFiles(t, p)
	for f, data := range old {
		g.Expect(after[f]).To(Equal(data), "%s must not change", f)
	}
	for _, f := range pkiFiles {
		fi, err := os.Stat(p.path(f))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), f)
	}
	fi, err := os.Stat(p.dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o700)))
}

func TestPKIUnreadableCA(t *testing.T) {
	g := NewWithT(t)
	p := pki{dir: filepath.Join(t.TempDir(), "pki")}
	g.Expect(p.ensure()).To(Succeed())
	g.Expect(os.WriteFile(p.path(caCertFile), []byte("garbage"), 0o644)).To(Succeed())
	err := p.ensure()
	ue := asUserError(g, err)
	g.Expect(ue.Problem).To(ContainSubstring("cannot be read"))
	data, readErr := os.ReadFile(p.path(caCertFile))
	g.Expect(readErr).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("garbage"), "a CA that cannot be read is never silently replaced")
}

func TestWriteKubeconfig(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	cp := &ControlPlane{cfg: Config{DataDir: dir, APIServerPort: 1234}, pki: pki{dir: filepath.Join(dir, "pki")}}
	g.Expect(cp.pki.ensure()).To(Succeed())
	g.Expect(cp.writeKubeconfig()).To(Succeed())
	g.Expect(cp.KubeconfigPath()).To(Equal(filepath.Join(dir, "kubeconfig")))

	fi, err := os.Stat(cp.KubeconfigPath())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), "the kubeconfig holds the admin key")

	kc, err := clientcmd.LoadFromFile(cp.KubeconfigPath())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kc.CurrentContext).To(Equal(ClusterName))
	g.Expect(kc.Contexts).To(HaveKey(ClusterName))
	g.Expect(kc.Contexts[ClusterName].Cluster).To(Equal(ClusterName))
	g.Expect(kc.Contexts[ClusterName].AuthInfo).To(Equal(ClusterName))
	g.Expect(kc.Clusters).To(HaveKey(ClusterName))
	cluster := kc.Clusters[ClusterName]
	g.Expect(cluster.Server).To(Equal("https://127.0.0.1:1234"))
	g.Expect(cluster.CertificateAuthority).To(BeEmpty(), "data is embedded, not referenced")
	files := readPKIFiles(t, cp.pki)
	g.Expect(cluster.CertificateAuthorityData).To(Equal(files[caCertFile]))
	g.Expect(kc.AuthInfos).To(HaveKey(ClusterName))
	user := kc.AuthInfos[ClusterName]
	g.Expect(user.ClientCertificateData).To(Equal(files[adminCertFile]))
	g.Expect(user.ClientKeyData).To(Equal(files[adminKeyFile]))

	rc, err := cp.RESTConfig()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rc.Host).To(Equal("https://127.0.0.1:1234"))
	g.Expect(rc.TLSClientConfig.CAData).To(Equal(files[caCertFile]))
	g.Expect(rc.TLSClientConfig.CertData).To(Equal(files[adminCertFile]))
	g.Expect(rc.TLSClientConfig.KeyData).To(Equal(files[adminKeyFile]))

	t.Run("missing PKI", func(t *testing.T) {
		empty := &ControlPlane{cfg: Config{DataDir: t.TempDir(), APIServerPort: 1}, pki: pki{dir: filepath.Join(t.TempDir(), "none")}}
		NewWithT(t).Expect(empty.writeKubeconfig()).To(MatchError(ContainSubstring("reading CA")))
	})
}
