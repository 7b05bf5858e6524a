// Package cainjector injects the CA bundle of a Certificate into the objects
// that name it with the pki.converge.dev/inject-ca-from annotation: validating
// and mutating webhook configurations (every webhook's clientConfig.caBundle),
// CustomResourceDefinitions with a conversion webhook
// (spec.conversion.webhook.clientConfig.caBundle) and APIServices
// (spec.caBundle). It is cert-manager's cainjector for Converge's
// Certificates.
//
// The bundle is the ca.crt of the Certificate's Secret, plus, for a
// Certificate of a built-in CA issuer, the CA that issuer signs with now
// (so a rotated CA is trusted before the Certificate is reissued from it;
// when that issuer or its CA Secret is gone, an IssuerCAUnavailable Warning
// Event says so and the ca.crt alone is injected).
// It follows renewals
// and CA rotation: when the CA changes, the CAs the object trusted before are
// kept beside the new one for an overlap (Reconciler.Overlap), so that a
// server still presenting a certificate from the old CA while it reloads is
// trusted, and dropped after it. The overlap does not end while a Secret
// issued by a Certificate in the CA Certificate's namespace still holds a
// certificate signed by an old CA (it is renewed at its own renewal time, not
// when its CA rotates), and runs again whenever such a certificate is
// reissued.
//
// Targets are watched as metadata only (CRDs are large) and read uncached
// when one must be patched; every patch carries the resourceVersion it read.
package cainjector

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/issuerref"
)

// ControllerName is the name used with --controllers.
const ControllerName = "cainjector"

// DefaultOverlap is how long the previous CA stays trusted after a rotation.
const DefaultOverlap = time.Hour

const (
	// OverlapUntilAnnotation is set on an injected object: when the CAs kept
	// from before a rotation stop being trusted (RFC 3339).
	OverlapUntilAnnotation = "pki.converge.dev/ca-overlap-until"
	// OverlapRotationAnnotation identifies the CA set that overlap is for.
	OverlapRotationAnnotation = "pki.converge.dev/ca-overlap-rotation"
	// OverlapLeavesAnnotation identifies the certificates signed by the
	// kept CAs that issued Secrets still held at the last reconcile; while
	// there are any the overlap does not end, and when they change it runs
	// again.
	OverlapLeavesAnnotation = "pki.converge.dev/ca-overlap-leaves"
)

// Event reasons.
const (
	// InjectedReason: the bundle was written.
	InjectedReason = "CAInjected"
	// InvalidAnnotationReason: the annotation is not <namespace>/<name>.
	InvalidAnnotationReason = "InvalidAnnotation"
	// CANotAvailableReason: the Certificate, its Secret or its ca.crt is
	// missing; the object is left as it is until they exist.
	CANotAvailableReason = "CANotAvailable"
	// IssuerCAUnavailableReason: the Certificate names a built-in CA
	// issuer, but that issuer or its CA Secret is gone (or the Secret holds
	// no certificate), so the CA it signs with now cannot be added; the
	// bundle is the Certificate's ca.crt alone, which does not trust a CA
	// the issuer rotated to until the Certificate is reissued from it.
	IssuerCAUnavailableReason = "IssuerCAUnavailable"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=pki.converge.dev,resources=certificates;issuers;clusterissuers,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler injects CA bundles. One controller per target kind shares it.
type Reconciler struct {
	client.Client
	// APIReader reads targets in full (the cache holds their metadata).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Overlap is how long the previous CAs stay trusted after a rotation
	// and after the last certificate they signed is reissued
	// (DefaultOverlap when zero; negative: not at all).
	Overlap time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// ClusterResourceNamespace holds the CA Secrets of ClusterIssuers.
	ClusterResourceNamespace string
}

// kind is one kind of target and where its bundles are.
type kind struct {
	gvk schema.GroupVersionKind
	// points returns the maps holding a caBundle field (nil: none, as for a
	// CRD without a conversion webhook).
	points func(u *unstructured.Unstructured) []map[string]any
}

func webhookPoints(u *unstructured.Unstructured) []map[string]any {
	list, _ := u.Object["webhooks"].([]any)
	var out []map[string]any
	for _, w := range list {
		wm, ok := w.(map[string]any)
		if !ok {
			continue
		}
		cc, ok := wm["clientConfig"].(map[string]any)
		if !ok {
			cc = map[string]any{}
			wm["clientConfig"] = cc
		}
		out = append(out, cc)
	}
	return out
}

func crdPoints(u *unstructured.Unstructured) []map[string]any {
	if s, _, _ := unstructured.NestedString(u.Object, "spec", "conversion", "strategy"); s != "Webhook" {
		return nil
	}
	m := u.Object
	for _, k := range []string{"spec", "conversion", "webhook", "clientConfig"} {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return []map[string]any{m}
}

func apiServicePoints(u *unstructured.Unstructured) []map[string]any {
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return nil
	}
	if skip, _ := spec["insecureSkipTLSVerify"].(bool); skip {
		return nil // the API server refuses a caBundle beside it
	}
	return []map[string]any{spec}
}

// Kinds are the kinds the injector serves.
var kinds = []kind{
	{gvk: schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"}, points: webhookPoints},
	{gvk: schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"}, points: webhookPoints},
	{gvk: schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, points: crdPoints},
	{gvk: schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}, points: apiServicePoints},
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

func annotated(o client.Object) bool {
	_, ok := o.GetAnnotations()[pkiv1alpha1.InjectCAFromAnnotation]
	return ok
}

// SetupWithManager registers one controller per target kind.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Overlap == 0 {
		r.Overlap = DefaultOverlap
	}
	for _, k := range kinds {
		kr := &kindReconciler{Reconciler: r, kind: k}
		err := ctrl.NewControllerManagedBy(mgr).
			Named(ControllerName+"-"+strings.ToLower(k.gvk.Kind)).
			For(metadataOf(k.gvk), builder.OnlyMetadata, builder.WithPredicates(predicate.NewPredicateFuncs(annotated))).
			Watches(&pkiv1alpha1.Certificate{}, handler.EnqueueRequestsFromMapFunc(kr.forCertificate)).
			Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(kr.forSecret)).
			Watches(&pkiv1alpha1.Issuer{}, handler.EnqueueRequestsFromMapFunc(kr.forIssuer)).
			Watches(&pkiv1alpha1.ClusterIssuer{}, handler.EnqueueRequestsFromMapFunc(kr.forIssuer)).
			Complete(kr)
		if err != nil {
			return fmt.Errorf("setting up CA injection for %s: %w", k.gvk.Kind, err)
		}
	}
	return nil
}

type kindReconciler struct {
	*Reconciler
	kind kind
}

// targets lists the objects of this kind whose annotation passes keep.
func (r *kindReconciler) targets(ctx context.Context, keep func(ns, name string) bool) []reconcile.Request {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(r.kind.gvk.GroupVersion().WithKind(r.kind.gvk.Kind + "List"))
	if err := r.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing CA injection targets", "kind", r.kind.gvk.Kind)
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		ns, name, err := parseRef(list.Items[i].Annotations[pkiv1alpha1.InjectCAFromAnnotation])
		if err == nil && keep(ns, name) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
		}
	}
	return out
}

func (r *kindReconciler) forCertificate(ctx context.Context, o client.Object) []reconcile.Request {
	return r.targets(ctx, func(ns, name string) bool { return ns == o.GetNamespace() && name == o.GetName() })
}

// forSecret wakes every target naming a Certificate in the Secret's
// namespace, or every target for a Secret of the cluster resource namespace
// (a ClusterIssuer's CA). There are few targets; reading each Certificate is
// the reconcile's job.
func (r *kindReconciler) forSecret(ctx context.Context, o client.Object) []reconcile.Request {
	clusterCA := r.ClusterResourceNamespace != "" && o.GetNamespace() == r.ClusterResourceNamespace
	return r.targets(ctx, func(ns, _ string) bool { return clusterCA || ns == o.GetNamespace() })
}

// forIssuer wakes every target naming a Certificate in the Issuer's
// namespace, or every target for a ClusterIssuer: its CA is added to the
// bundle, and when it is deleted (or comes back) the bundle changes.
func (r *kindReconciler) forIssuer(ctx context.Context, o client.Object) []reconcile.Request {
	return r.targets(ctx, func(ns, _ string) bool { return o.GetNamespace() == "" || ns == o.GetNamespace() })
}

func parseRef(v string) (string, string, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%s must be <namespace>/<certificate>, got %q", pkiv1alpha1.InjectCAFromAnnotation, v)
	}
	return ns, name, nil
}

// Reconcile writes the bundle into one object.
func (r *kindReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.kind.gvk)
	if err := r.APIReader.Get(ctx, req.NamespacedName, u); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ref, ok := u.GetAnnotations()[pkiv1alpha1.InjectCAFromAnnotation]
	if !ok || !u.GetDeletionTimestamp().IsZero() {
		return reconcile.Result{}, nil
	}
	ns, name, err := parseRef(ref)
	if err != nil {
		r.Recorder.Eventf(u, nil, corev1.EventTypeWarning, InvalidAnnotationReason, "Inject", "%v", err)
		return reconcile.Result{}, nil // nothing to retry until the annotation changes
	}
	cert, caPEM, why := r.caOf(ctx, ns, name)
	if why != "" {
		r.Recorder.Eventf(u, nil, corev1.EventTypeWarning, CANotAvailableReason, "Inject", "%s; the CA bundle is left as it is", why)
		return reconcile.Result{}, nil // the Certificate and Secret watches wake it
	}
	caPEM, err = r.withIssuerCA(ctx, u, cert, caPEM)
	if err != nil {
		return reconcile.Result{}, err
	}
	points := r.kind.points(u)
	if len(points) == 0 {
		return reconcile.Result{}, nil
	}
	current, _ := base64.StdEncoding.DecodeString(stringField(points[0], "caBundle"))
	anns := u.GetAnnotations()
	until, _ := time.Parse(time.RFC3339, anns[OverlapUntilAnnotation])
	now := r.Now()
	st := overlapState{until: until, rotation: anns[OverlapRotationAnnotation], leaves: anns[OverlapLeavesAnnotation]}
	p, err := desired(caPEM, current, st, func() ([]*x509.Certificate, error) { return r.issuedLeaves(ctx, ns) }, now, r.Overlap)
	if errors.Is(err, errListingLeaves) {
		return reconcile.Result{}, fmt.Errorf("injecting the CA of Certificate %s/%s into %s %s: %w", ns, name, r.kind.gvk.Kind, u.GetName(), err)
	}
	if err != nil {
		r.Recorder.Eventf(u, nil, corev1.EventTypeWarning, CANotAvailableReason, "Inject", "ca.crt of Certificate %s/%s: %v; the CA bundle is left as it is", ns, name, err)
		return reconcile.Result{}, nil
	}
	base := u.DeepCopy()
	enc := base64.StdEncoding.EncodeToString(p.bundle)
	for _, pt := range points {
		pt["caBundle"] = enc
	}
	delete(anns, OverlapUntilAnnotation)
	delete(anns, OverlapRotationAnnotation)
	delete(anns, OverlapLeavesAnnotation)
	if !p.until.IsZero() {
		anns[OverlapUntilAnnotation] = p.until.UTC().Format(time.RFC3339)
		anns[OverlapRotationAnnotation] = p.rotation
		if p.leaves != "" {
			anns[OverlapLeavesAnnotation] = p.leaves
		}
	}
	u.SetAnnotations(anns)
	var res reconcile.Result
	if !p.until.IsZero() {
		res.RequeueAfter = p.until.Sub(now) + time.Second
	}
	if equalObjects(base, u) {
		return res, nil
	}
	if err := r.Patch(ctx, u, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, fmt.Errorf("injecting the CA of Certificate %s/%s into %s %s: %w", ns, name, r.kind.gvk.Kind, u.GetName(), err)
	}
	msg := fmt.Sprintf("CA bundle of Certificate %s/%s injected into %d place(s)", ns, name, len(points))
	if !p.until.IsZero() {
		msg += fmt.Sprintf("; the previous CA stays trusted until %s", p.until.UTC().Format(time.RFC3339))
		if p.leaves != "" {
			msg += " (and while issued Secrets hold certificates it signed)"
		}
	}
	r.Recorder.Eventf(u, nil, corev1.EventTypeNormal, InjectedReason, "Inject", "%s", msg)
	return res, nil
}

// errListingLeaves wraps a failure to read the issued Secrets.
var errListingLeaves = errors.New("listing issued certificates")

// issuedLeaves returns the first certificate of every Secret a Certificate
// issued (labelled with pkiv1alpha1.CertificateNameLabel; their data is in
// the cache) in namespace ns, the namespace of the CA's Certificate. Only
// there: whoever can write Secrets there can already replace the CA, while
// a tenant elsewhere holding a certificate from the old CA must not keep it
// trusted in cluster-wide objects. A Secret change there also wakes the
// targets (forSecret), so a reissue is seen at once.
func (r *kindReconciler) issuedLeaves(ctx context.Context, ns string) ([]*x509.Certificate, error) {
	list := &corev1.SecretList{}
	if err := r.List(ctx, list, client.InNamespace(ns), client.HasLabels{pkiv1alpha1.CertificateNameLabel}); err != nil {
		return nil, fmt.Errorf("%w: %w", errListingLeaves, err)
	}
	var out []*x509.Certificate
	for i := range list.Items {
		if chain := parseBundle(list.Items[i].Data[corev1.TLSCertKey]); len(chain) > 0 {
			out = append(out, chain[0])
		}
	}
	return out, nil
}

// caOf returns the Certificate and the ca.crt of its Secret, or why there
// is none.
func (r *kindReconciler) caOf(ctx context.Context, ns, name string) (*pkiv1alpha1.Certificate, []byte, string) {
	cert := &pkiv1alpha1.Certificate{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cert); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Sprintf("Certificate %s/%s not found", ns, name)
		}
		return nil, nil, fmt.Sprintf("reading Certificate %s/%s: %v", ns, name, err)
	}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: cert.Spec.SecretName}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Sprintf("Secret %s/%s of Certificate %s not found (not issued yet?)", ns, cert.Spec.SecretName, name)
		}
		return nil, nil, fmt.Sprintf("reading Secret %s/%s: %v", ns, cert.Spec.SecretName, err)
	}
	ca := sec.Data["ca.crt"]
	if len(ca) == 0 {
		return nil, nil, fmt.Sprintf("Secret %s/%s of Certificate %s has no ca.crt", ns, cert.Spec.SecretName, name)
	}
	return cert, ca, ""
}

// withIssuerCA returns ca with the CA the Certificate's built-in CA issuer
// signs with now added first: it is trusted before the certificate is
// reissued from it. When that CA is gone for good (the issuer or its CA
// Secret does not exist, the Secret holds no certificate), a Warning Event
// on the target says so and ca is returned alone, as before the issuer's CA
// was added; a read that may succeed when retried returns the error.
func (r *kindReconciler) withIssuerCA(ctx context.Context, target client.Object, cert *pkiv1alpha1.Certificate, ca []byte) ([]byte, error) {
	issuerCA, err := r.issuerCA(ctx, cert)
	var gone *issuerCAGoneError
	switch {
	case errors.As(err, &gone):
		r.Recorder.Eventf(target, nil, corev1.EventTypeWarning, IssuerCAUnavailableReason, "Inject",
			"%v; the CA bundle is the ca.crt of Certificate %s/%s alone, which trusts a CA the issuer rotated to only once the Certificate is reissued from it",
			err, cert.Namespace, cert.Name)
		return ca, nil
	case err != nil:
		return nil, fmt.Errorf("reading the CA of the issuer of Certificate %s/%s: %w", cert.Namespace, cert.Name, err)
	case len(issuerCA) == 0:
		return ca, nil
	}
	return encodeBundle(union(parseBundle(issuerCA), parseBundle(ca))), nil
}

// issuerCAGoneError says why the CA of a Certificate's built-in CA issuer
// cannot be read until something changes (no retry cures it).
type issuerCAGoneError struct{ msg string }

func (e *issuerCAGoneError) Error() string { return e.msg }

// readError is a failed read of what: an *issuerCAGoneError when it does
// not exist, else err with context.
func readError(err error, what string) error {
	if apierrors.IsNotFound(err) {
		return &issuerCAGoneError{msg: what + " not found"}
	}
	return fmt.Errorf("reading %s: %w", what, err)
}

// issuerCA returns the CA a built-in CA issuer of the Certificate signs
// with now (the ca.crt of its CA Secret, else the last certificate of its
// tls.crt, as the issuer does), or nil for any other issuer. Without it, a
// Certificate named in the annotation whose CA rotated changes its ca.crt
// and its certificate in one write, and its server can present the new
// certificate before the API server trusts the new CA. When the issuer or
// its CA is gone the error is an *issuerCAGoneError.
func (r *kindReconciler) issuerCA(ctx context.Context, cert *pkiv1alpha1.Certificate) ([]byte, error) {
	if !issuerref.IsBuiltIn(cert.Spec.IssuerRef) {
		return nil, nil
	}
	kind := issuerref.Kind(cert.Spec.IssuerRef)
	iss, err := issuerref.Get(ctx, r.Client, cert.Namespace, cert.Spec.IssuerRef)
	if err != nil {
		return nil, readError(err, fmt.Sprintf("%s %s of Certificate %s/%s", kind, cert.Spec.IssuerRef.Name, cert.Namespace, cert.Name))
	}
	if iss.GetSpec().CA == nil {
		return nil, nil
	}
	ns := issuerref.SecretNamespace(iss, r.ClusterResourceNamespace)
	if ns == "" {
		return nil, &issuerCAGoneError{msg: fmt.Sprintf("%s %s has no namespace for its CA Secret (no cluster resource namespace is set)", kind, iss.GetName())}
	}
	key := types.NamespacedName{Namespace: ns, Name: iss.GetSpec().CA.SecretName}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, key, sec); err != nil {
		return nil, readError(err, fmt.Sprintf("CA Secret %s of %s %s", key, kind, iss.GetName()))
	}
	if ca := sec.Data["ca.crt"]; len(ca) > 0 {
		return ca, nil
	}
	if chain := parseBundle(sec.Data[corev1.TLSCertKey]); len(chain) > 0 {
		return encodeBundle(chain[len(chain)-1:]), nil
	}
	return nil, &issuerCAGoneError{msg: fmt.Sprintf("CA Secret %s of %s %s holds no certificate (neither ca.crt nor tls.crt)", key, kind, iss.GetName())}
}

// union returns a, then the certificates of b not in a.
func union(a, b []*x509.Certificate) []*x509.Certificate {
	out := append([]*x509.Certificate(nil), a...)
	for _, c := range b {
		if !contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

func stringField(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func equalObjects(a, b *unstructured.Unstructured) bool {
	ja, err1 := a.MarshalJSON()
	jb, err2 := b.MarshalJSON()
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}
