// Package floors holds the floors benchmarks measure a controller against
// in the same run (bench/certificates, bench/machines, bench/databases,
// bench/upgrade, bench/scale): the same work done by a plain client loop at
// the controller's API budget.
package floors

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/par"
	"github.com/converge-dev/converge/internal/pki"
)

// CA is a CA key pair: the Secret a ca Issuer reads (named "ca", no
// namespace set) and its parsed parts, to sign with.
type CA struct {
	Secret *corev1.Secret
	Cert   *x509.Certificate
	Key    crypto.Signer
}

// NewCA makes an ECDSA CA valid for a year.
func NewCA() (*CA, error) {
	key, err := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	if err != nil {
		return nil, err
	}
	csrPEM, _ := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{CommonName: "bench CA"}, key)
	csr, _ := pki.ParseCSR(csrPEM)
	tmpl, _ := pki.Template(csr, 24*time.Hour*365, nil, true, time.Now())
	crt, err := pki.Sign(tmpl, nil, key)
	if err != nil {
		return nil, err
	}
	keyPEM, _ := pki.EncodeKey(key, pkiv1alpha1.PKCS8)
	chain, _ := pki.ParseCerts(crt)
	return &CA{Secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: keyPEM}}, Cert: chain[0], Key: key}, nil
}

// Certificates does what n Certificates of spec(i) from ca need, in a
// plain loop on workers: a key, a CSR, a signature and one TLS Secret
// created in ns per Certificate, through c (give it the controllers'
// budget).
func Certificates(ctx context.Context, c client.Client, ca *CA, ns string, n, workers int, spec func(i int) *pkiv1alpha1.CertificateSpec) (time.Duration, error) {
	start := time.Now()
	err := par.Do(workers, n, func(i int) error {
		s := spec(i)
		ks := pki.ResolveKey(s.PrivateKey)
		key, err := pki.GenerateKey(ks)
		if err != nil {
			return err
		}
		csrPEM, err := pki.BuildCSR(s, key)
		if err != nil {
			return err
		}
		csr, err := pki.ParseCSR(csrPEM)
		if err != nil {
			return err
		}
		tmpl, err := pki.Template(csr, pki.DefaultDuration, nil, false, time.Now())
		if err != nil {
			return err
		}
		crt, err := pki.Sign(tmpl, ca.Cert, ca.Key)
		if err != nil {
			return err
		}
		keyPEM, _ := pki.EncodeKey(key, ks.Encoding)
		return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.SecretName}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: keyPEM, "ca.crt": ca.Secret.Data[corev1.TLSCertKey]}})
	})
	return time.Since(start), err
}

// KwokNodes registers n kwok Nodes named prefix-<i> in a plain loop through
// c (give it the machine controllers' budget) until kwok has them all
// Ready, then deletes them (not timed): a KwokMachine's floor.
func KwokNodes(ctx context.Context, c client.Client, prefix string, n int) (time.Duration, error) {
	start := time.Now()
	for i := range n {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i),
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}}, Spec: corev1.NodeSpec{ProviderID: fmt.Sprintf("%s://%d", prefix, i)}}
		if err := c.Create(ctx, node); err != nil {
			return 0, err
		}
	}
	for {
		nodes := &corev1.NodeList{}
		if err := c.List(ctx, nodes); err != nil {
			return 0, err
		}
		ready := 0
		for _, nd := range nodes.Items {
			if strings.HasPrefix(nd.Name, prefix+"-") && NodeReady(&nd) {
				ready++
			}
		}
		if ready == n {
			took := time.Since(start)
			for i := range n {
				_ = c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)}})
			}
			return took, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// NodeReady says whether n's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
