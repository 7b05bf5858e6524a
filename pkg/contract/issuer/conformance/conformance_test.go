package conformance_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	"github.com/converge-dev/converge/pkg/contract/issuer/conformance"
)

var env *testenv.Environment

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Manager: func(o *setup.Options) {
		// Only the webhooks matter here: the issuers are the tests' own.
		o.Controllers = []string{"certificaterequest"}
	}}, &env))
}

// brokenChild is set in the process that runs the suite against an issuer
// that signs everything.
const brokenChild = "CONVERGE_CONFORMANCE_BROKEN_ISSUER"

// TestSuiteFailsOnAnIssuerThatSignsEverything runs the conformance suite,
// in a child process of this test binary, against an issuer that signs
// every request without checking its CSR's signature, and asserts that the
// suite fails there, on the broken-CSR case, while the same issuer checking
// signatures passes it here.
func TestSuiteFailsOnAnIssuerThatSignsEverything(t *testing.T) {
	testenv.Need(t, env)
	if os.Getenv(brokenChild) != "" {
		runAgainst(t, false)
		return
	}
	g := NewWithT(t)
	t.Run("honest issuer passes", func(t *testing.T) { runAgainst(t, true) })

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestSuiteFailsOnAnIssuerThatSignsEverything$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), brokenChild+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	g.Expect(err).To(BeAssignableToTypeOf(exit), "the suite must fail on an issuer that signs everything:\n%s", out)
	g.Expect(string(out)).To(ContainSubstring("--- FAIL: TestSuiteFailsOnAnIssuerThatSignsEverything/never_issues_a_request_with_a_broken_CSR"), "%s", out)
	g.Expect(string(out)).To(ContainSubstring("a broken CSR was signed"), "%s", out)
	g.Expect(string(out)).To(ContainSubstring("--- PASS: TestSuiteFailsOnAnIssuerThatSignsEverything/signs_a_valid_request"), "the child failed for another reason:\n%s", out)
}

// runAgainst runs the suite against a small out-of-tree issuer; checks says
// whether it verifies the CSR's signature before signing.
func runAgainst(t *testing.T, checks bool) {
	env.SkipValidationForLabelled(t)
	ns := env.NewNamespace(t)
	group := "issuers.example.com"
	// The issuer's kind declares the issuer contract, as a third party's
	// CRD does.
	env.InstallThirdPartyCRD(t, schema.GroupVersionKind{Group: group, Version: "v1", Kind: "VaultIssuer"}, pcontract.Issuer)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go signer(ctx, t, ns, group, checks)
	conformance.Run(t, conformance.Harness{Client: env.Client, Namespace: ns,
		IssuerRef: pkiv1alpha1.IssuerReference{Name: "vault", Kind: "VaultIssuer", Group: group},
		SkipAdmission: func(obj client.Object) {
			l := obj.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l[testenv.NoValidationLabel] = "true"
			obj.SetLabels(l)
		}})
}

// signer answers the CertificateRequests of its group from its own CA.
// With checks it refuses a CSR whose signature does not verify (Failed);
// without, it signs whatever key and names the CSR carries.
func signer(ctx context.Context, t *testing.T, ns, group string, checks bool) {
	caKey, _ := pki.GenerateKey(pki.KeySpec{Algorithm: pkiv1alpha1.ECDSAKeyAlgorithm, Size: 256})
	caCSRPEM, _ := pki.BuildCSR(&pkiv1alpha1.CertificateSpec{CommonName: "conformance CA"}, caKey)
	caCSR, _ := pki.ParseCSR(caCSRPEM)
	caTmpl, _ := pki.Template(caCSR, time.Hour, nil, true, time.Now())
	caPEM, _ := pki.Sign(caTmpl, nil, caKey)
	caCert, _ := pki.ParseCerts(caPEM)
	for ctx.Err() == nil {
		var list pkiv1alpha1.CertificateRequestList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err == nil {
			for i := range list.Items {
				cr := &list.Items[i]
				if cr.Spec.IssuerRef.Group != group || len(cr.Status.Conditions) > 0 {
					continue
				}
				var leaf []byte
				csr, err := parse(cr.Spec.Request, checks)
				if err == nil {
					tmpl, terr := pki.Template(csr, cr.Spec.Duration.Duration, cr.Spec.Usages, cr.Spec.IsCA, time.Now())
					if err = terr; err == nil {
						leaf, err = pki.Sign(tmpl, caCert[0], caKey)
					}
				}
				if err != nil {
					meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: pkiv1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: pkiv1alpha1.FailedReason, Message: err.Error()})
					cr.Status.FailureTime = &metav1.Time{Time: time.Now()}
				} else {
					cr.Status.Certificate, cr.Status.CA = leaf, caPEM
					meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: pkiv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: pkiv1alpha1.IssuedReason, Message: "signed"})
				}
				if err := env.Client.Status().Update(ctx, cr); err != nil && ctx.Err() == nil {
					t.Logf("signer: %v", err)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func parse(data []byte, checks bool) (*x509.CertificateRequest, error) {
	if checks {
		return pki.ParseCSR(data)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("no PEM")
	}
	return x509.ParseCertificateRequest(b.Bytes)
}
