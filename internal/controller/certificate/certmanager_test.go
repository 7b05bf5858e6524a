package certificate_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// TestCertManagerManifest: cert-manager manifests with only apiVersion
// changed are accepted (the webhook maps issuerRef.group cert-manager.io to
// the built-in issuers) and issued.
func TestCertManagerManifest(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	data, err := os.ReadFile("testdata/cert-manager.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	data = bytes.ReplaceAll(data, []byte("apiVersion: cert-manager.io/v1"), []byte("apiVersion: pki.converge.dev/v1alpha1"))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else {
			g.Expect(err).NotTo(HaveOccurred())
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetNamespace(ns)
		g.Expect(env.Client.Create(t.Context(), u)).To(Succeed(), u.GetName())
	}
	for _, name := range []string{"serving-cert", "metrics-certs"} {
		c := waitCert(t, g, ns, name, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason)
		g.Expect(c.Spec.IssuerRef.Group).To(Equal(pkiv1alpha1.GroupVersion.Group))
	}
	s := getSecret(t, ns, "metrics-server-cert")
	g.Expect(s.Labels).To(HaveKeyWithValue("app", "project"))
	g.Expect(strings.HasPrefix(string(s.Data["tls.key"]), "-----BEGIN PRIVATE KEY-----")).To(BeTrue(), "PKCS8")
}
