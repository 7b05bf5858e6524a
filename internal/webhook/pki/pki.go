// Package pki holds the admission webhooks of the pki.converge.dev API
// group: defaulting and validation of Certificates, Issuers,
// ClusterIssuers and CertificateRequests, with messages naming the field.
package pki

import (
	"context"
	"fmt"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/acme"
	"github.com/converge-dev/converge/internal/issuerref"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/webhook/specerr"
	pcontract "github.com/converge-dev/converge/pkg/contract"
)

// +kubebuilder:webhook:path=/mutate-pki-converge-dev-v1alpha1-certificate,mutating=true,failurePolicy=fail,sideEffects=None,groups=pki.converge.dev,resources=certificates,verbs=create;update,versions=v1alpha1,name=mcertificate.pki.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-pki-converge-dev-v1alpha1-certificate,mutating=false,failurePolicy=fail,sideEffects=None,groups=pki.converge.dev,resources=certificates,verbs=create;update,versions=v1alpha1,name=vcertificate.pki.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-pki-converge-dev-v1alpha1-issuer,mutating=false,failurePolicy=fail,sideEffects=None,groups=pki.converge.dev,resources=issuers,verbs=create;update,versions=v1alpha1,name=vissuer.pki.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-pki-converge-dev-v1alpha1-clusterissuer,mutating=false,failurePolicy=fail,sideEffects=None,groups=pki.converge.dev,resources=clusterissuers,verbs=create;update,versions=v1alpha1,name=vclusterissuer.pki.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-pki-converge-dev-v1alpha1-certificaterequest,mutating=false,failurePolicy=fail,sideEffects=None,groups=pki.converge.dev,resources=certificaterequests,verbs=create;update,versions=v1alpha1,name=vcertificaterequest.pki.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Certificate defaults and validates Certificates.
type Certificate struct {
	// MinimumDuration is the shortest spec.duration accepted;
	// pki.MinimumDuration (1h) when zero.
	MinimumDuration time.Duration
	// MaxRSAKeySize is the largest RSA spec.privateKey.size accepted;
	// pki.DefaultMaxRSAKeySize when zero.
	MaxRSAKeySize int
	// Contracts answers, from the manager's cache, whether the kind of an
	// issuerRef of another group declares the issuer contract;
	// SetupWithManager fills it.
	Contracts pcontract.Checker
}

// SetupWithManager registers the webhooks.
func (w Certificate) SetupWithManager(mgr ctrl.Manager) error {
	w.Contracts = pcontract.Checker{Reader: mgr.GetCache(), Mapper: mgr.GetRESTMapper()}
	return ctrl.NewWebhookManagedBy(mgr, &pkiv1alpha1.Certificate{}).WithDefaulter(w).WithValidator(w).Complete()
}

// CertManagerGroup is cert-manager's API group: an issuerRef naming it (as
// manifests written for cert-manager do) names the built-in issuers.
const CertManagerGroup = "cert-manager.io"

// Default fills issuerRef.kind and issuerRef.group for built-in issuers, and
// maps cert-manager's group to the built-in one.
func (Certificate) Default(_ context.Context, c *pkiv1alpha1.Certificate) error {
	if c.Spec.IssuerRef.Group == "" || c.Spec.IssuerRef.Group == CertManagerGroup {
		c.Spec.IssuerRef.Group = pkiv1alpha1.GroupVersion.Group
	}
	if c.Spec.IssuerRef.Kind == "" && issuerref.IsBuiltIn(c.Spec.IssuerRef) {
		c.Spec.IssuerRef.Kind = issuerref.IssuerKind
	}
	return nil
}

// ValidateCreate checks a new Certificate; an issuerRef of another group
// must name a kind declaring the issuer contract.
func (w Certificate) ValidateCreate(ctx context.Context, c *pkiv1alpha1.Certificate) (admission.Warnings, error) {
	return w.validate(ctx, nil, c)
}

// ValidateUpdate checks a change (every field may change: it reissues); a
// changed issuerRef is checked against the issuer contract again (an
// unchanged one stays: the controller reports it Stalled should its CRD
// lose the label).
func (w Certificate) ValidateUpdate(ctx context.Context, old, c *pkiv1alpha1.Certificate) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, c.Spec) {
		return nil, nil
	}
	return w.validate(ctx, old, c)
}

func (w Certificate) validate(ctx context.Context, old, c *pkiv1alpha1.Certificate) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := w.ValidateSpec(&c.Spec, p)
	if len(errs) == 0 && (old == nil || old.Spec.IssuerRef != c.Spec.IssuerRef) {
		e, err := w.checkContract(ctx, c.Spec.IssuerRef, p.Child("issuerRef"))
		if err != nil {
			return nil, err
		}
		errs = e
	}
	return nil, specerr.Invalid(pkiv1alpha1.GroupVersion, "Certificate", c.Name, errs)
}

// checkContract refuses, naming spec.issuerRef.kind, an issuer of another
// group whose kind is not a namespaced kind with a CRD carrying the issuer
// contract label (a core kind, a cluster-scoped kind, an unlabelled CRD).
// Answered from the cache: no API request per admission.
func (w Certificate) checkContract(ctx context.Context, ref pkiv1alpha1.IssuerReference, p *field.Path) (field.ErrorList, error) {
	if issuerref.IsBuiltIn(ref) {
		return nil, nil
	}
	if err := w.Contracts.Check(ctx, schema.GroupVersionKind{Group: ref.Group, Kind: ref.Kind}, pcontract.Issuer); err != nil {
		if pcontract.IsNotDeclared(err) {
			return field.ErrorList{field.Invalid(p.Child("kind"), ref.Kind, err.Error()+
				" (an issuer kind's CRD declares it with the label "+pcontract.Label(pcontract.Issuer)+"="+pcontract.Version+")")}, nil
		}
		return nil, apierrors.NewInternalError(err)
	}
	return nil, nil
}

// ValidateDelete allows every deletion.
func (Certificate) ValidateDelete(context.Context, *pkiv1alpha1.Certificate) (admission.Warnings, error) {
	return nil, nil
}

// ValidateSpec checks what the schema cannot.
func (w Certificate) ValidateSpec(s *pkiv1alpha1.CertificateSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(s.SecretName) {
		errs = append(errs, field.Invalid(p.Child("secretName"), s.SecretName, msg))
	}
	if s.CommonName == "" && len(s.DNSNames) == 0 && len(s.IPAddresses) == 0 && len(s.URIs) == 0 && len(s.EmailAddresses) == 0 && !s.IsCA {
		errs = append(errs, field.Required(p.Child("dnsNames"), "at least one of commonName, dnsNames, ipAddresses, uris or emailAddresses is required (unless isCA)"))
	}
	for i, d := range s.DNSNames {
		fp := p.Child("dnsNames").Index(i)
		if net.ParseIP(d) != nil {
			errs = append(errs, field.Invalid(fp, d, "an IP address: put it in spec.ipAddresses"))
			continue
		}
		name := strings.TrimPrefix(d, "*.")
		for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(name)) {
			errs = append(errs, field.Invalid(fp, d, msg))
		}
	}
	for i, ip := range s.IPAddresses {
		if net.ParseIP(ip) == nil {
			errs = append(errs, field.Invalid(p.Child("ipAddresses").Index(i), ip, "not an IP address"))
		}
	}
	for i, u := range s.URIs {
		if pu, err := url.Parse(u); err != nil || pu.Scheme == "" {
			errs = append(errs, field.Invalid(p.Child("uris").Index(i), u, "not an absolute URI"))
		}
	}
	for i, e := range s.EmailAddresses {
		if a, err := mail.ParseAddress(e); err != nil || a.Address != e {
			errs = append(errs, field.Invalid(p.Child("emailAddresses").Index(i), e, "not an email address"))
		}
	}
	minimum := w.MinimumDuration
	if minimum == 0 {
		minimum = pki.MinimumDuration
	}
	duration := pki.DefaultDuration
	if s.Duration != nil {
		duration = s.Duration.Duration
		if duration < minimum {
			errs = append(errs, field.Invalid(p.Child("duration"), s.Duration.Duration.String(), fmt.Sprintf("must be at least %s", minimum)))
		}
	}
	if s.RenewBefore != nil {
		if s.RenewBefore.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child("renewBefore"), s.RenewBefore.Duration.String(), "must be positive"))
		} else if maxBefore := pki.MaxRenewBefore(duration); s.RenewBefore.Duration > maxBefore {
			errs = append(errs, field.Invalid(p.Child("renewBefore"), s.RenewBefore.Duration.String(),
				fmt.Sprintf("must be at most %s, 2/3 of spec.duration (%s): a certificate lives at least a third of its duration before it is renewed", maxBefore, duration)))
		}
	}
	if pct := s.RenewBeforePercentage; pct != nil && time.Duration(*pct)*duration/100 > pki.MaxRenewBefore(duration) {
		errs = append(errs, field.Invalid(p.Child("renewBeforePercentage"), *pct,
			"must be at most 66: a certificate lives at least a third of its duration before it is renewed"))
	}
	if pk := s.PrivateKey; pk != nil {
		if err := pki.ValidateKeySize(pk.Algorithm, int(pk.Size)); err != nil {
			errs = append(errs, field.Invalid(p.Child("privateKey", "size"), pk.Size, err.Error()))
		} else if err := pki.RSAKeySizeAllowed(pki.ResolveKey(pk), w.MaxRSAKeySize); err != nil {
			errs = append(errs, field.Forbidden(p.Child("privateKey", "size"), err.Error()))
		}
		if pk.Algorithm == pkiv1alpha1.Ed25519KeyAlgorithm && pk.Encoding == pkiv1alpha1.PKCS1 {
			errs = append(errs, field.Invalid(p.Child("privateKey", "encoding"), pk.Encoding, "Ed25519 keys are encoded as PKCS8"))
		}
	}
	if _, _, err := pki.Usages(s.Usages, s.IsCA); err != nil {
		errs = append(errs, field.Invalid(p.Child("usages"), s.Usages, err.Error()))
	}
	errs = append(errs, validateIssuerRef(s.IssuerRef, p.Child("issuerRef"))...)
	return errs
}

func validateIssuerRef(ref pkiv1alpha1.IssuerReference, p *field.Path) field.ErrorList {
	if !issuerref.IsBuiltIn(ref) {
		if ref.Kind == "" {
			return field.ErrorList{field.Required(p.Child("kind"), "an external issuer (group "+ref.Group+") needs a kind")}
		}
		return nil
	}
	if k := issuerref.Kind(ref); k != issuerref.IssuerKind && k != issuerref.ClusterIssuerKind {
		return field.ErrorList{field.NotSupported(p.Child("kind"), k, []string{issuerref.IssuerKind, issuerref.ClusterIssuerKind})}
	}
	return nil
}

// Issuer validates Issuers.
type Issuer struct {
	// ACMEAllowedDirectories are the URL prefixes spec.acme.server may
	// name (--acme-allowed-directories).
	ACMEAllowedDirectories []string
}

// SetupWithManager registers the webhook.
func (w Issuer) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &pkiv1alpha1.Issuer{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new Issuer.
func (w Issuer) ValidateCreate(_ context.Context, i *pkiv1alpha1.Issuer) (admission.Warnings, error) {
	p := field.NewPath("spec")
	return nil, specerr.Invalid(pkiv1alpha1.GroupVersion, "Issuer", i.Name, append(ValidateIssuerSpec(&i.Spec, p), validateACMEServer(nil, &i.Spec, w.ACMEAllowedDirectories, p)...))
}

// ValidateUpdate checks a change.
func (w Issuer) ValidateUpdate(_ context.Context, old, i *pkiv1alpha1.Issuer) (admission.Warnings, error) {
	p := field.NewPath("spec")
	return nil, specerr.Invalid(pkiv1alpha1.GroupVersion, "Issuer", i.Name, append(ValidateIssuerSpec(&i.Spec, p), validateACMEServer(&old.Spec, &i.Spec, w.ACMEAllowedDirectories, p)...))
}

// ValidateDelete allows every deletion.
func (Issuer) ValidateDelete(context.Context, *pkiv1alpha1.Issuer) (admission.Warnings, error) {
	return nil, nil
}

// ClusterIssuer validates ClusterIssuers.
type ClusterIssuer struct {
	// ACMEAllowedDirectories are the URL prefixes spec.acme.server may
	// name (--acme-allowed-directories).
	ACMEAllowedDirectories []string
}

// SetupWithManager registers the webhook.
func (w ClusterIssuer) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &pkiv1alpha1.ClusterIssuer{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new ClusterIssuer.
func (w ClusterIssuer) ValidateCreate(_ context.Context, i *pkiv1alpha1.ClusterIssuer) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := append(ValidateIssuerSpec(&i.Spec.IssuerSpec, p), validateACMEServer(nil, &i.Spec.IssuerSpec, w.ACMEAllowedDirectories, p)...)
	if err := specerr.Invalid(pkiv1alpha1.GroupVersion, "ClusterIssuer", i.Name, append(errs, validatePolicy(i.Spec.Policy, p.Child("policy"))...)); err != nil {
		return nil, err
	}
	return policyWarnings(i), nil
}

// ValidateUpdate checks a change.
func (w ClusterIssuer) ValidateUpdate(_ context.Context, old, i *pkiv1alpha1.ClusterIssuer) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := append(ValidateIssuerSpec(&i.Spec.IssuerSpec, p), validateACMEServer(&old.Spec.IssuerSpec, &i.Spec.IssuerSpec, w.ACMEAllowedDirectories, p)...)
	if err := specerr.Invalid(pkiv1alpha1.GroupVersion, "ClusterIssuer", i.Name, append(errs, validatePolicy(i.Spec.Policy, p.Child("policy"))...)); err != nil {
		return nil, err
	}
	return policyWarnings(i), nil
}

// ValidateDelete allows every deletion.
func (ClusterIssuer) ValidateDelete(context.Context, *pkiv1alpha1.ClusterIssuer) (admission.Warnings, error) {
	return nil, nil
}

// validatePolicy checks a ClusterIssuer's policy: its namespace selector
// must parse, every allowedIPAddresses entry be a CIDR, every
// allowedEmailAddresses entry an e-mail address pattern and every
// allowedURIs entry a URI pattern (the schema checks the DNS name patterns
// and, roughly, the others).
func validatePolicy(pol *pkiv1alpha1.ClusterIssuerPolicy, p *field.Path) field.ErrorList {
	if pol == nil {
		return nil
	}
	var errs field.ErrorList
	if pol.NamespaceSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(pol.NamespaceSelector); err != nil {
			errs = append(errs, field.Invalid(p.Child("namespaceSelector"), pol.NamespaceSelector.String(), err.Error()))
		}
	}
	for i, cidr := range pol.AllowedIPAddresses {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			errs = append(errs, field.Invalid(p.Child("allowedIPAddresses").Index(i), cidr,
				"not a CIDR: write an address range as 10.96.0.0/12 or 2001:db8::/64, one address as 192.0.2.7/32"))
		}
	}
	for i, pat := range pol.AllowedEmailAddresses {
		if err := pki.CheckEmailPattern(pat); err != nil {
			errs = append(errs, field.Invalid(p.Child("allowedEmailAddresses").Index(i), pat, "not an e-mail address pattern: "+err.Error()))
		}
	}
	for i, pat := range pol.AllowedURIs {
		if _, err := pki.ParseURIPattern(pat); err != nil {
			errs = append(errs, field.Invalid(p.Child("allowedURIs").Index(i), pat, "not a URI pattern: "+err.Error()))
		}
	}
	return errs
}

// policyWarnings warns the admin creating or changing an ACME
// ClusterIssuer without spec.policy.allowedDNSNames: it orders any DNS name
// (but another namespace's svc/pod names) for every namespace it selects,
// validated through the manager's one HTTP-01 port, so any of those
// namespaces gets a publicly trusted certificate for any name routed to
// the manager. That is cert-manager's reading too (a ClusterIssuer is the
// admin's grant), so it is said, not refused.
func policyWarnings(ci *pkiv1alpha1.ClusterIssuer) admission.Warnings {
	pol := ci.Spec.Policy
	if ci.Spec.ACME == nil || (pol != nil && len(pol.AllowedDNSNames) > 0) {
		return nil
	}
	who := "every namespace of the cluster (spec.policy.namespaceSelector is unset)"
	if pol != nil && pol.NamespaceSelector != nil {
		who = "every namespace spec.policy.namespaceSelector selects (" + metav1.FormatLabelSelector(pol.NamespaceSelector) + ")"
	}
	return admission.Warnings{fmt.Sprintf("ACME ClusterIssuer %s without spec.policy.allowedDNSNames orders any DNS name for %s: "+
		"each of them can obtain a publicly trusted certificate for any name that reaches the manager's HTTP-01 port; "+
		"set spec.policy.allowedDNSNames (e.g. \"*.{namespace}.apps.example.com\") unless that is the grant you mean (docs/security.md)", ci.Name, who)}
}

// ValidateIssuerSpec checks an issuer's spec.
func ValidateIssuerSpec(s *pkiv1alpha1.IssuerSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if s.SelfSigned != nil {
		n++
	}
	if s.CA != nil {
		n++
		for _, msg := range validation.IsDNS1123Subdomain(s.CA.SecretName) {
			errs = append(errs, field.Invalid(p.Child("ca", "secretName"), s.CA.SecretName, msg))
		}
	}
	if a := s.ACME; a != nil {
		n++
		if u, err := url.Parse(a.Server); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("acme", "server"), a.Server, "must be an http(s) URL of an ACME directory"))
		}
		if a.Email != "" {
			if _, err := mail.ParseAddress(a.Email); err != nil {
				errs = append(errs, field.Invalid(p.Child("acme", "email"), a.Email, "not an email address"))
			}
		}
		for _, msg := range validation.IsDNS1123Subdomain(a.PrivateKeySecretRef.Name) {
			errs = append(errs, field.Invalid(p.Child("acme", "privateKeySecretRef", "name"), a.PrivateKeySecretRef.Name, msg))
		}
		for i, sv := range a.Solvers {
			if sv.HTTP01 == nil {
				errs = append(errs, field.Required(p.Child("acme", "solvers").Index(i).Child("http01"), "only http01 solvers are supported"))
			}
		}
	}
	if n != 1 {
		errs = append(errs, field.Invalid(p, n, "exactly one of selfSigned, ca and acme must be set"))
	}
	return errs
}

// validateACMEServer refuses a new or changed spec.acme.server that is not
// under an allowed directory (an unchanged one stays: the controller
// reports it Stalled if the admin narrowed the list since).
func validateACMEServer(old, s *pkiv1alpha1.IssuerSpec, allowed []string, p *field.Path) field.ErrorList {
	if s.ACME == nil || (old != nil && old.ACME != nil && old.ACME.Server == s.ACME.Server) {
		return nil
	}
	if !acme.DirectoryAllowed(s.ACME.Server, allowed) {
		return field.ErrorList{field.Forbidden(p.Child("acme", "server"),
			fmt.Sprintf("%q is not an ACME directory the cluster admin allowed (--acme-allowed-directories: %s)", acme.BoundText(s.ACME.Server, 256), strings.Join(allowed, ", ")))}
	}
	return nil
}

// CertificateRequest validates CertificateRequests: the CSR parses and the
// spec is immutable.
type CertificateRequest struct{}

// SetupWithManager registers the webhook.
func (w CertificateRequest) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &pkiv1alpha1.CertificateRequest{}).WithValidator(w).Complete()
}

// ValidateCreate checks a new request.
func (CertificateRequest) ValidateCreate(_ context.Context, cr *pkiv1alpha1.CertificateRequest) (admission.Warnings, error) {
	p := field.NewPath("spec")
	var errs field.ErrorList
	if _, err := pki.ParseCSR(cr.Spec.Request); err != nil {
		errs = append(errs, field.Invalid(p.Child("request"), "<csr>", err.Error()))
	}
	errs = append(errs, validateIssuerRef(cr.Spec.IssuerRef, p.Child("issuerRef"))...)
	return nil, specerr.Invalid(pkiv1alpha1.GroupVersion, "CertificateRequest", cr.Name, errs)
}

// ValidateUpdate refuses spec changes.
func (CertificateRequest) ValidateUpdate(_ context.Context, old, cr *pkiv1alpha1.CertificateRequest) (admission.Warnings, error) {
	if !apiequality.Semantic.DeepEqual(old.Spec, cr.Spec) {
		return nil, specerr.Invalid(pkiv1alpha1.GroupVersion, "CertificateRequest", cr.Name, field.ErrorList{field.Forbidden(field.NewPath("spec"), "a CertificateRequest's spec is immutable")})
	}
	return nil, nil
}

// ValidateDelete allows every deletion.
func (CertificateRequest) ValidateDelete(context.Context, *pkiv1alpha1.CertificateRequest) (admission.Warnings, error) {
	return nil, nil
}
