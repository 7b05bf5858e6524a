package security

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// A CA ClusterIssuer's policy checked DNS names and IP addresses, but no
// e-mail address and no URI but another namespace's SPIFFE ID. Before,
// tenant A got from a CA ClusterIssuer, with or without a policy, a leaf for
// admin@corp.example, for https://bank.example/ and for a SPIFFE ID of its
// namespace under another trust domain: every client trusting the cluster
// CA would take A for that person or site. Now an e-mail address is signed
// only when it matches spec.policy.allowedEmailAddresses (none: for no
// tenant namespace), and a URI only when it matches spec.policy.allowedURIs
// or, without them, when it is a Kubernetes SPIFFE ID of A's own namespace.
// Refusals are Denied/Stalled IssuerPolicyDenied naming the SAN, the
// ClusterIssuer, the list and the namespace; a SAN inside the lists is
// issued; the webhook and schema refuse a pattern naming its index; nothing
// is written in B's namespace.
func TestClusterIssuerSignsNoEmailOrURIUnlessAllowed(t *testing.T) {
	attacker, victim := newTenant(t), newTenant(t)
	g := NewWithT(t)
	ctx := t.Context()
	a, b := attacker.NS, victim.NS

	// No policy: no e-mail address, no URI but A's own SPIFFE ID.
	open := clusterCA(t, g, "cluster-sans-"+a, nil)
	for name, c := range map[string]struct {
		spec  pkiv1alpha1.CertificateSpec
		words []string
	}{
		"email":       {pkiv1alpha1.CertificateSpec{EmailAddresses: []string{"admin@corp.example"}}, []string{`e-mail address "admin@corp.example"`, "spec.policy.allowedEmailAddresses"}},
		"email-cn":    {pkiv1alpha1.CertificateSpec{CommonName: "svc-a." + a + ".svc", EmailAddresses: []string{a + "@corp.example"}}, []string{`e-mail address "` + a + `@corp.example"`, "sets none"}},
		"bank":        {pkiv1alpha1.CertificateSpec{URIs: []string{"https://bank.example/"}}, []string{`URI "https://bank.example/"`, "spec.policy.allowedURIs", "sets none"}},
		"own-and-uri": {pkiv1alpha1.CertificateSpec{URIs: []string{"spiffe://cluster.local/ns/" + a + "/sa/default", "https://bank.example/login"}}, []string{`URI "https://bank.example/login"`}},
		"b-spiffe":    {pkiv1alpha1.CertificateSpec{URIs: []string{"spiffe://cluster.local/ns/" + b + "/sa/default"}}, []string{"identity of namespace " + b}},
		"dot-spiffe":  {pkiv1alpha1.CertificateSpec{URIs: []string{"spiffe://cluster.local/ns/" + a + "/sa/x/../../" + b + "/sa/default"}}, []string{"spec.policy.allowedURIs"}},
	} {
		cr := askClusterIssuer(t, g, attacker, open, name, c.spec)
		expectDenied(g, cr, append(c.words, `ClusterIssuer "`+open.Name+`"`, "namespace "+a)...)
	}
	// A's own SPIFFE ID, under any trust domain, is issued as before.
	own := askClusterIssuer(t, g, attacker, open, "own-spiffe", pkiv1alpha1.CertificateSpec{
		URIs: []string{"spiffe://cluster.local/ns/" + a + "/sa/default", "spiffe://other.example/ns/" + a + "/sa/web"}})
	testenv.HasCondition(g, own.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.IssuedReason)

	// A policy: A's own mailbox and mail domain, A's SPIFFE IDs in
	// cluster.local and A's app URL.
	emails := []string{"{namespace}@mail.example.com", "*@{namespace}.example.com"}
	uris := []string{"spiffe://cluster.local/ns/{namespace}/sa/*", "https://{namespace}.apps.example.com/"}
	narrow := clusterCA(t, g, "cluster-sans-policy-"+a, &pkiv1alpha1.ClusterIssuerPolicy{AllowedEmailAddresses: emails, AllowedURIs: uris})
	for name, c := range map[string]struct {
		spec pkiv1alpha1.CertificateSpec
		word string
	}{
		"p-email":      {pkiv1alpha1.CertificateSpec{EmailAddresses: []string{"admin@corp.example"}}, `e-mail address "admin@corp.example" matches none`},
		"p-b-mailbox":  {pkiv1alpha1.CertificateSpec{EmailAddresses: []string{a + "@mail.example.com", b + "@mail.example.com"}}, `"` + b + `@mail.example.com"`},
		"p-b-domain":   {pkiv1alpha1.CertificateSpec{EmailAddresses: []string{"ops@" + b + ".example.com"}}, `"ops@` + b + `.example.com"`},
		"p-bank":       {pkiv1alpha1.CertificateSpec{URIs: []string{"https://bank.example/"}}, `URI "https://bank.example/" matches none`},
		"p-b-app":      {pkiv1alpha1.CertificateSpec{URIs: []string{"https://" + b + ".apps.example.com/"}}, `"https://` + b + `.apps.example.com/"`},
		"p-other-td":   {pkiv1alpha1.CertificateSpec{URIs: []string{"spiffe://evil.example/ns/" + a + "/sa/default"}}, `"spiffe://evil.example/ns/` + a + `/sa/default"`},
		"p-b-spiffe":   {pkiv1alpha1.CertificateSpec{URIs: []string{"spiffe://cluster.local/ns/" + b + "/sa/default"}}, `"spiffe://cluster.local/ns/` + b + `/sa/default"`},
		"p-deeper-app": {pkiv1alpha1.CertificateSpec{URIs: []string{"https://" + a + ".apps.example.com/admin"}}, `"https://` + a + `.apps.example.com/admin"`},
	} {
		cr := askClusterIssuer(t, g, attacker, narrow, name, c.spec)
		// The message names the list, quoted.
		listed := `spec.policy.allowedURIs ["` + strings.Join(uris, `", "`) + `"]`
		if len(c.spec.EmailAddresses) > 0 {
			listed = `spec.policy.allowedEmailAddresses ["` + strings.Join(emails, `", "`) + `"]`
		}
		expectDenied(g, cr, c.word, `ClusterIssuer "`+narrow.Name+`"`, listed, "(for namespace "+a+")")
	}
	inside := askClusterIssuer(t, g, attacker, narrow, "inside", pkiv1alpha1.CertificateSpec{
		EmailAddresses: []string{a + "@mail.example.com", "ops@" + a + ".example.com"},
		URIs:           []string{"spiffe://cluster.local/ns/" + a + "/sa/web", "https://" + a + ".apps.example.com/"}})
	testenv.HasCondition(g, inside.Status.Conditions, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.IssuedReason)
	blk, _ := pem.Decode(inside.Status.Certificate)
	g.Expect(blk).NotTo(BeNil())
	leaf, err := x509.ParseCertificate(blk.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(leaf.EmailAddresses).To(Equal([]string{a + "@mail.example.com", "ops@" + a + ".example.com"}))
	var got []string
	for _, u := range leaf.URIs {
		got = append(got, u.String())
	}
	g.Expect(got).To(Equal([]string{"spiffe://cluster.local/ns/" + a + "/sa/web", "https://" + a + ".apps.example.com/"}))

	// The admin's patterns are checked at admission, naming the index: by
	// the webhook (a dot segment, a bad escape, a label over 63 characters)
	// and by the schema (no scheme, "*" inside a local part).
	bad := func(name string, pol *pkiv1alpha1.ClusterIssuerPolicy, fields ...string) {
		t.Helper()
		ci := &pkiv1alpha1.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + a},
			Spec: pkiv1alpha1.ClusterIssuerSpec{IssuerSpec: pkiv1alpha1.IssuerSpec{SelfSigned: &pkiv1alpha1.SelfSignedIssuer{}}, Policy: pol}}
		err := env.Client.Create(ctx, ci)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		for _, f := range fields {
			g.Expect(err.Error()).To(ContainSubstring(f))
		}
		g.Expect(err.Error()).NotTo(Or(ContainSubstring("allowedURIs[0]"), ContainSubstring("allowedEmailAddresses[0]")))
	}
	bad("cluster-sans-webhook", &pkiv1alpha1.ClusterIssuerPolicy{
		AllowedEmailAddresses: []string{"ops@example.com", "ops@" + strings.Repeat("x", 64) + ".example.com"},
		AllowedURIs:           []string{"https://example.com/", "https://example.com/a/../b", "https://example.com/%zz"}},
		"spec.policy.allowedEmailAddresses[1]", "spec.policy.allowedURIs[1]", "spec.policy.allowedURIs[2]", "dot segments")
	bad("cluster-sans-schema", &pkiv1alpha1.ClusterIssuerPolicy{
		AllowedEmailAddresses: []string{"ops@example.com", "ops-*@example.com"},
		AllowedURIs:           []string{"https://example.com/", "bank.example"}},
		"spec.policy.allowedEmailAddresses[1]", "spec.policy.allowedURIs[1]")
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("ops-%d@example.com", i)
	}
	bad("cluster-sans-many", &pkiv1alpha1.ClusterIssuerPolicy{AllowedEmailAddresses: many}, "spec.policy.allowedEmailAddresses", "must have at most 64 items")

	// The victim is untouched.
	var crs pkiv1alpha1.CertificateRequestList
	g.Expect(env.Client.List(ctx, &crs, client.InNamespace(b))).To(Succeed())
	g.Expect(crs.Items).To(BeEmpty())
	var secrets corev1.SecretList
	g.Expect(env.Client.List(ctx, &secrets, client.InNamespace(b))).To(Succeed())
	for _, s := range secrets.Items {
		g.Expect(s.Type).NotTo(Equal(corev1.SecretTypeTLS), "a TLS Secret appeared in the victim's namespace: %s", s.Name)
	}
}
