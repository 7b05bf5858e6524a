// Package certcli implements `converge cert`: status (the chain in the
// Secret, expiry, renewal time, the last request and why it failed), renew
// (ask for a new certificate now) and inspect secret.
package certcli

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/issuerref"
	"github.com/converge-dev/converge/internal/pki"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// Renew asks for a new certificate now: it sets Issuing=True with reason
// ManuallyTriggered (as `cmctl renew`), with an optimistic lock so that a
// concurrent status write is never lost. It returns the patched Certificate.
func Renew(ctx context.Context, c client.Client, ns, name string) (*pkiv1alpha1.Certificate, error) {
	var cert pkiv1alpha1.Certificate
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cert); err != nil {
		return nil, err
	}
	if meta.IsStatusConditionTrue(cert.Status.Conditions, pkiv1alpha1.IssuingCondition) {
		return nil, fmt.Errorf("certificate %s/%s is already being issued", ns, name)
	}
	before := cert.DeepCopy()
	creconcile.MarkTrue(&cert.Status.Conditions, cert.Generation, pkiv1alpha1.IssuingCondition, pkiv1alpha1.ManuallyTriggeredReason,
		pkiv1alpha1.ManuallyTriggeredReason+": renewal requested by converge cert renew")
	// Locked, and a conflict is returned rather than re-applied: the check
	// above (not already issuing) holds only for the object it read.
	if _, err := creconcile.PatchStatusLocked(ctx, c, before, &cert); err != nil {
		return nil, fmt.Errorf("requesting renewal: %w", err)
	}
	return &cert, nil
}

// Status prints a Certificate's state, its Secret's chain and its last
// request.
func Status(ctx context.Context, c client.Client, w io.Writer, ns, name string) error {
	var cert pkiv1alpha1.Certificate
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cert); err != nil {
		return err
	}
	p := func(format string, a ...any) { _, _ = fmt.Fprintf(w, format+"\n", a...) }
	p("Name:\t%s/%s", ns, name)
	ref := cert.Spec.IssuerRef
	p("Issuer:\t%s %s (%s)", issuerref.Kind(ref), ref.Name, orDefault(ref.Group, pkiv1alpha1.GroupVersion.Group))
	p("Secret:\t%s", cert.Spec.SecretName)
	for _, cond := range cert.Status.Conditions {
		p("%s:\t%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	if t := cert.Status.NotAfter; t != nil {
		p("Expires:\t%s (in %s)", t.UTC().Format(time.RFC3339), time.Until(t.Time).Round(time.Second))
	}
	if t := cert.Status.RenewalTime; t != nil {
		p("Renewal:\t%s (in %s)", t.UTC().Format(time.RFC3339), time.Until(t.Time).Round(time.Second))
	}
	if cert.Status.Revision != nil {
		p("Revision:\t%d", *cert.Status.Revision)
	}
	if n := cert.Status.FailedIssuanceAttempts; n != nil {
		p("Failed attempts:\t%d, last at %s, next try at %s", *n, fmtTime(cert.Status.LastFailureTime), fmtTime(cert.Status.NextRetryTime))
	}
	var s corev1.Secret
	switch err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: cert.Spec.SecretName}, &s); {
	case apierrors.IsNotFound(err):
		p("Chain:\t(Secret not found)")
	case err != nil:
		return err
	default:
		printChain(p, s.Data[corev1.TLSCertKey])
	}
	var crs pkiv1alpha1.CertificateRequestList
	if err := c.List(ctx, &crs, client.InNamespace(ns), client.MatchingLabels{pkiv1alpha1.CertificateNameLabel: name}); err != nil {
		return err
	}
	sort.Slice(crs.Items, func(i, j int) bool {
		return crs.Items[i].CreationTimestamp.Before(&crs.Items[j].CreationTimestamp) ||
			(crs.Items[i].CreationTimestamp.Equal(&crs.Items[j].CreationTimestamp) && crs.Items[i].Name < crs.Items[j].Name)
	})
	if n := len(crs.Items); n > 0 {
		last := crs.Items[n-1]
		p("Last request:\t%s (revision %s)", last.Name, last.Annotations[pkiv1alpha1.RevisionAnnotation])
		for _, cond := range last.Status.Conditions {
			p("  %s:\t%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
	}
	return nil
}

// InspectSecret prints the chain, the key and ca.crt of a TLS Secret.
func InspectSecret(ctx context.Context, c client.Client, w io.Writer, ns, name string) error {
	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		return err
	}
	p := func(format string, a ...any) { _, _ = fmt.Fprintf(w, format+"\n", a...) }
	p("Secret:\t%s/%s (%s)", ns, name, s.Type)
	if n := s.Annotations[pkiv1alpha1.CertificateNameAnnotation]; n != "" {
		p("Certificate:\t%s", n)
	}
	printChain(p, s.Data[corev1.TLSCertKey])
	if k, err := pki.ParseKey(s.Data[corev1.TLSPrivateKeyKey]); err != nil {
		p("Key:\tinvalid: %v", err)
	} else {
		chain, _ := pki.ParseCerts(s.Data[corev1.TLSCertKey])
		p("Key:\t%T, matches tls.crt: %t", k, len(chain) > 0 && pki.PublicKeyMatches(chain[0], k))
	}
	if ca := s.Data["ca.crt"]; len(ca) > 0 {
		chain, err := pki.ParseCerts(s.Data[corev1.TLSCertKey])
		if err == nil {
			err = pki.VerifiesWith(chain, ca, time.Now())
		}
		p("ca.crt:\tverifies tls.crt: %s", okOr(err))
	}
	return nil
}

func printChain(p func(string, ...any), data []byte) {
	chain, err := pki.ParseCerts(data)
	if err != nil {
		p("Chain:\tinvalid: %v", err)
		return
	}
	for i, c := range chain {
		p("Chain[%d]:\tsubject=%q issuer=%q notAfter=%s%s", i, c.Subject.String(), c.Issuer.String(), c.NotAfter.UTC().Format(time.RFC3339), names(c))
	}
}

func names(c *x509.Certificate) string {
	var n []string
	n = append(n, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		n = append(n, ip.String())
	}
	if c.IsCA {
		n = append(n, "CA")
	}
	if len(n) == 0 {
		return ""
	}
	return " names=" + strings.Join(n, ",")
}

func fmtTime(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func okOr(err error) string {
	if err != nil {
		return "no: " + err.Error()
	}
	return "yes"
}
