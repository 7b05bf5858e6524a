// Package certificaterequest implements the signer of the built-in issuers:
// it signs CertificateRequests whose issuerRef names a pki.converge.dev
// Issuer or ClusterIssuer (selfSigned, ca, acme) and leaves every other group
// to its own controller (the issuer contract,
// docs/contracts/certificate-issuer.md). A request ends in exactly one of
// Ready=True (status.certificate set), Ready=False reason Failed (with
// status.failureTime), InvalidRequest, or Denied (IssuerPolicyDenied: a
// ClusterIssuer's policy refuses the namespace or a name, or a namespaced
// acme Issuer asks for a name outside --acme-namespaced-dns-names,
// policy.go); a
// request waiting for its issuer stays Ready=False reason Pending.
package certificaterequest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/acme"
	"github.com/converge-dev/converge/internal/issuerref"
	"github.com/converge-dev/converge/internal/pki"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers.
const ControllerName = "certificaterequest"

// +kubebuilder:rbac:groups=pki.converge.dev,resources=certificaterequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=pki.converge.dev,resources=certificaterequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=pki.converge.dev,resources=issuers;clusterissuers,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler signs CertificateRequests of the built-in issuers.
type Reconciler struct {
	client.Client
	// Recorder emits Events.
	Recorder events.EventRecorder
	// ClusterResourceNamespace holds the Secrets of ClusterIssuers.
	ClusterResourceNamespace string
	// Solver answers the HTTP-01 challenges of ACME orders.
	Solver *acme.Solver
	// ACMEAllowedDirectories are the URL prefixes of the ACME directories
	// an acme issuer may name (--acme-allowed-directories).
	ACMEAllowedDirectories []string
	// ACMENamespacedDNSNames bound the names an acme Issuer (namespaced,
	// outside ClusterResourceNamespace) may order: allowedDNSNames patterns
	// with {namespace} (--acme-namespaced-dns-names); empty allows none.
	ACMENamespacedDNSNames []string
	// ACMETimeout bounds one ACME order; 2 minutes when zero.
	ACMETimeout time.Duration
	// MaxConcurrentReconciles defaults to 8.
	MaxConcurrentReconciles int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.ACMETimeout == 0 {
		r.ACMETimeout = 2 * time.Minute
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 8
	}
	if r.Solver == nil {
		r.Solver = acme.NewSolver()
	}
	return ctrl.NewControllerManagedBy(mgr).Named(ControllerName).
		For(&pkiv1alpha1.CertificateRequest{}).
		Watches(&pkiv1alpha1.Issuer{}, handler.EnqueueRequestsFromMapFunc(r.pendingFor(false))).
		Watches(&pkiv1alpha1.ClusterIssuer{}, handler.EnqueueRequestsFromMapFunc(r.pendingFor(true))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// pendingFor maps an issuer to the unfinished requests naming it.
func (r *Reconciler) pendingFor(cluster bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var l pkiv1alpha1.CertificateRequestList
		var opts []client.ListOption
		if !cluster {
			opts = append(opts, client.InNamespace(o.GetNamespace()))
		}
		if err := r.List(ctx, &l, opts...); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range l.Items {
			cr := &l.Items[i]
			ref := cr.Spec.IssuerRef
			if !issuerref.IsBuiltIn(ref) || ref.Name != o.GetName() || (issuerref.Kind(ref) == issuerref.ClusterIssuerKind) != cluster || finished(cr) {
				continue
			}
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
		}
		return out
	}
}

// finished says whether a request has its final state.
func finished(cr *pkiv1alpha1.CertificateRequest) bool {
	if meta.IsStatusConditionTrue(cr.Status.Conditions, pkiv1alpha1.DeniedCondition) ||
		meta.IsStatusConditionTrue(cr.Status.Conditions, pkiv1alpha1.InvalidRequestCondition) {
		return true
	}
	c := meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)
	return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == pkiv1alpha1.FailedReason)
}

// setStalled keeps Stalled in step with the request's own conditions: a
// refused (Denied, InvalidRequest) or failed (Ready=False reason Failed)
// request is final, Stalled with that condition's reason, which kstatus
// reads Failed; a pending one has no Stalled (kstatus reads its Ready=False
// InProgress). It reports whether anything changed.
func setStalled(cr *pkiv1alpha1.CertificateRequest) bool {
	conds := &cr.Status.Conditions
	var cause *metav1.Condition
	for _, t := range []string{pkiv1alpha1.DeniedCondition, pkiv1alpha1.InvalidRequestCondition} {
		if c := meta.FindStatusCondition(*conds, t); c != nil && c.Status == metav1.ConditionTrue {
			cause = c
			break
		}
	}
	if c := meta.FindStatusCondition(*conds, pkiv1alpha1.ReadyCondition); cause == nil && c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == pkiv1alpha1.FailedReason {
		cause = c
	}
	if cause != nil {
		return creconcile.MarkTrue(conds, cr.Generation, creconcile.StalledCondition, cause.Reason, cause.Message)
	}
	return creconcile.Remove(conds, creconcile.StalledCondition)
}

// outcome is what one signing attempt decided.
type outcome struct {
	cert, ca []byte
	// reason is Issued, Pending, Failed, InvalidRequest or
	// IssuerPolicyDenied.
	reason, message string
}

// Reconcile signs one request.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cr pkiv1alpha1.CertificateRequest
	if err := r.Get(ctx, req.NamespacedName, &cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !issuerref.IsBuiltIn(cr.Spec.IssuerRef) || !cr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if finished(&cr) {
		// Final (an approver's Denied included): only the conditions
		// kstatus reads are kept in step, so that it reads Failed.
		patcher := creconcile.NewStatusPatcher(r.Client, &cr)
		if !setStalled(&cr) {
			return ctrl.Result{}, nil
		}
		if err := patcher.Patch(ctx, &cr); err != nil {
			return ctrl.Result{}, fmt.Errorf("patching the status: %w", err)
		}
		return ctrl.Result{}, nil
	}
	o, err := r.sign(ctx, &cr)
	if err != nil {
		return ctrl.Result{}, err
	}
	patcher := creconcile.NewStatusPatcher(r.Client, &cr)
	now := metav1.NewTime(r.Now())
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		creconcile.SetCondition(&cr.Status.Conditions, cr.Generation, t, s, reason, msg)
	}
	switch o.reason {
	case pkiv1alpha1.IssuedReason:
		cr.Status.Certificate, cr.Status.CA = o.cert, o.ca
		set(pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, o.reason, "Certificate fetched from issuer successfully")
		r.Recorder.Eventf(&cr, nil, corev1.EventTypeNormal, o.reason, "Sign", "Signed by %s %s", issuerref.Kind(cr.Spec.IssuerRef), cr.Spec.IssuerRef.Name)
	case pkiv1alpha1.InvalidRequestReason:
		set(pkiv1alpha1.InvalidRequestCondition, metav1.ConditionTrue, o.reason, o.message)
		set(pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.FailedReason, o.message)
		cr.Status.FailureTime = &now
		r.Recorder.Eventf(&cr, nil, corev1.EventTypeWarning, o.reason, "Sign", "%s", o.message)
	case pkiv1alpha1.IssuerPolicyDeniedReason:
		set(pkiv1alpha1.DeniedCondition, metav1.ConditionTrue, o.reason, o.message)
		set(pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.FailedReason, o.message)
		cr.Status.FailureTime = &now
		r.Recorder.Eventf(&cr, nil, corev1.EventTypeWarning, o.reason, "Sign", "%s", o.message)
	case pkiv1alpha1.FailedReason:
		set(pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, o.reason, o.message)
		cr.Status.FailureTime = &now
		r.Recorder.Eventf(&cr, nil, corev1.EventTypeWarning, o.reason, "Sign", "%s", o.message)
	default:
		set(pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.PendingReason, o.message)
	}
	setStalled(&cr)
	if err := patcher.Patch(ctx, &cr); err != nil {
		return ctrl.Result{}, fmt.Errorf("patching the status: %w", err)
	}
	return ctrl.Result{}, nil
}

// sign runs the issuer. An error is transient (retried); every other
// outcome is recorded.
func (r *Reconciler) sign(ctx context.Context, cr *pkiv1alpha1.CertificateRequest) (outcome, error) {
	ref := cr.Spec.IssuerRef
	kind := issuerref.Kind(ref)
	if kind != issuerref.IssuerKind && kind != issuerref.ClusterIssuerKind {
		return outcome{reason: pkiv1alpha1.InvalidRequestReason, message: fmt.Sprintf("spec.issuerRef.kind %q: want Issuer or ClusterIssuer", kind)}, nil
	}
	csr, err := pki.ParseCSR(cr.Spec.Request)
	if err != nil {
		return outcome{reason: pkiv1alpha1.InvalidRequestReason, message: err.Error()}, nil
	}
	iss, err := issuerref.Get(ctx, r.Client, cr.Namespace, ref)
	if apierrors.IsNotFound(err) {
		return outcome{reason: pkiv1alpha1.PendingReason, message: fmt.Sprintf("%s %q not found", kind, ref.Name)}, nil
	} else if err != nil {
		return outcome{}, err
	}
	if ok, why := issuerref.Ready(iss); !ok {
		return outcome{reason: pkiv1alpha1.PendingReason, message: fmt.Sprintf("%s %q is not ready: %s", kind, ref.Name, why)}, nil
	}
	if ci, ok := iss.(*pkiv1alpha1.ClusterIssuer); ok {
		why, err := r.checkPolicy(ctx, ci, cr.Namespace, csr)
		if err != nil {
			return outcome{}, err
		}
		if why != "" {
			return outcome{reason: pkiv1alpha1.IssuerPolicyDeniedReason, message: why}, nil
		}
	}
	duration := pki.DefaultDuration
	if cr.Spec.Duration != nil && cr.Spec.Duration.Duration > 0 {
		duration = cr.Spec.Duration.Duration
	}
	tmpl, err := pki.Template(csr, duration, cr.Spec.Usages, cr.Spec.IsCA, r.Now())
	if err != nil {
		return outcome{reason: pkiv1alpha1.InvalidRequestReason, message: "spec.usages: " + err.Error()}, nil
	}
	sp := iss.GetSpec()
	switch {
	case sp.SelfSigned != nil:
		return r.signSelf(ctx, cr, csr.PublicKey, tmpl)
	case sp.CA != nil:
		return r.signCA(ctx, cr, iss, tmpl)
	case sp.ACME != nil:
		if cr.Spec.IsCA {
			// An ACME CA never issues a CA certificate; asking anyway would
			// come back as a leaf, which the Certificate would take for a
			// changed spec and order again, without end.
			return outcome{reason: pkiv1alpha1.InvalidRequestReason, message: fmt.Sprintf(
				"spec.isCA: %s %q is an ACME issuer, and ACME servers issue only leaf certificates; use a selfSigned or ca issuer for a CA", kind, ref.Name)}, nil
		}
		if _, ok := iss.(*pkiv1alpha1.Issuer); ok && cr.Namespace != r.ClusterResourceNamespace {
			// Every order's challenge is answered by the one shared HTTP-01
			// port: the admin's rule, not the CA, says which names a
			// namespace may order. Checked before any request to the CA.
			if why := namespacedACMERefused(r.ACMENamespacedDNSNames, ref.Name, cr.Namespace, csr); why != "" {
				return outcome{reason: pkiv1alpha1.IssuerPolicyDeniedReason, message: why}, nil
			}
		}
		return r.signACME(ctx, iss, csr.Raw, csr.DNSNames, csr.IPAddresses)
	}
	return outcome{reason: pkiv1alpha1.PendingReason, message: "the issuer sets no type"}, nil
}

// signCA signs tmpl with the CA in the Secret of a ca Issuer or
// ClusterIssuer iss.
func (r *Reconciler) signCA(ctx context.Context, cr *pkiv1alpha1.CertificateRequest, iss issuerref.Object, tmpl *x509.Certificate) (outcome, error) {
	ref, kind, sp := cr.Spec.IssuerRef, issuerref.Kind(cr.Spec.IssuerRef), iss.GetSpec()
	if cr.Spec.IsCA && kind == issuerref.ClusterIssuerKind && cr.Namespace != r.ClusterResourceNamespace {
		// A CA under the cluster's CA would let a namespace mint any
		// certificate every namespace trusts, offline and unseen.
		return outcome{reason: pkiv1alpha1.InvalidRequestReason, message: fmt.Sprintf(
			"spec.isCA: ClusterIssuer %q signs CA certificates only for requests in the cluster resource namespace %s; use a ca or selfSigned Issuer of this namespace for a CA", ref.Name, r.ClusterResourceNamespace)}, nil
	}
	ns := issuerref.SecretNamespace(iss, r.ClusterResourceNamespace)
	var s corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: sp.CA.SecretName}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return outcome{reason: pkiv1alpha1.PendingReason, message: fmt.Sprintf("CA Secret %s/%s not found", ns, sp.CA.SecretName)}, nil
		}
		return outcome{}, err
	}
	chain, key, ca, err := pki.LoadCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Data["ca.crt"])
	if err != nil {
		return outcome{reason: pkiv1alpha1.PendingReason, message: fmt.Sprintf("CA Secret %s/%s: %v", ns, sp.CA.SecretName, err)}, nil
	}
	leaf, err := pki.Sign(tmpl, chain[0], key)
	if err != nil {
		return outcome{reason: pkiv1alpha1.FailedReason, message: err.Error()}, nil
	}
	for _, c := range chain { // the CA chain, up to but not including a self-signed root
		if c.CheckSignatureFrom(c) != nil {
			leaf = append(leaf, pki.EncodeCert(c.Raw)...)
		}
	}
	return outcome{reason: pkiv1alpha1.IssuedReason, cert: leaf, ca: ca}, nil
}

func (r *Reconciler) signSelf(ctx context.Context, cr *pkiv1alpha1.CertificateRequest, pub any, t *x509.Certificate) (outcome, error) {
	name := cr.Annotations[pkiv1alpha1.PrivateKeySecretAnnotation]
	if name == "" {
		return outcome{reason: pkiv1alpha1.InvalidRequestReason, message: "a selfSigned request needs the " + pkiv1alpha1.PrivateKeySecretAnnotation + " annotation"}, nil
	}
	var s corev1.Secret
	// The key Secret is read from the request's own namespace only.
	if err := r.Get(ctx, types.NamespacedName{Namespace: cr.Namespace, Name: name}, &s); err != nil {
		// Just created by the Certificate controller, maybe not yet in
		// the cache: retried with backoff (no watch would wake us).
		return outcome{}, fmt.Errorf("reading private key Secret %q: %w", name, err)
	}
	key, err := pki.ParseKey(s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return outcome{reason: pkiv1alpha1.FailedReason, message: fmt.Sprintf("private key Secret %q: %v", name, err)}, nil
	}
	if pki.PublicKeyHash(key.Public()) != pki.PublicKeyHash(pub) {
		return outcome{reason: pkiv1alpha1.InvalidRequestReason, message: fmt.Sprintf("the private key in Secret %q does not match the CSR", name)}, nil
	}
	leaf, err := pki.Sign(t, nil, key)
	if err != nil {
		return outcome{reason: pkiv1alpha1.FailedReason, message: err.Error()}, nil
	}
	return outcome{reason: pkiv1alpha1.IssuedReason, cert: leaf, ca: leaf}, nil
}

func (r *Reconciler) signACME(ctx context.Context, iss issuerref.Object, csrDER []byte, dns []string, ips []net.IP) (outcome, error) {
	sp := iss.GetSpec().ACME
	ns := issuerref.SecretNamespace(iss, r.ClusterResourceNamespace)
	keyName := sp.PrivateKeySecretRef.Key
	if keyName == "" {
		keyName = corev1.TLSPrivateKeyKey
	}
	var s corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: sp.PrivateKeySecretRef.Name}, &s); err != nil {
		return outcome{}, fmt.Errorf("reading the ACME account key: %w", err)
	}
	key, err := pki.ParseKey(s.Data[keyName])
	if err != nil {
		return outcome{reason: pkiv1alpha1.PendingReason, message: "ACME account key: " + err.Error()}, nil
	}
	uri := ""
	if st := iss.GetStatus().ACME; st != nil {
		uri = st.URI
	}
	c, err := acme.NewClient(sp.Server, r.ACMEAllowedDirectories, sp.CABundle, key, uri)
	if errors.Is(err, acme.ErrDirectoryNotAllowed) {
		return outcome{reason: pkiv1alpha1.FailedReason, message: acme.StatusText(err) + "; no request was made"}, nil
	}
	if err != nil {
		return outcome{reason: pkiv1alpha1.PendingReason, message: err.Error()}, nil
	}
	ipStrs := make([]string, 0, len(ips))
	for _, ip := range ips {
		ipStrs = append(ipStrs, ip.String())
	}
	actx, cancel := context.WithTimeout(ctx, r.ACMETimeout)
	defer cancel()
	chain, err := acme.Obtain(actx, c, r.Solver, dns, ipStrs, csrDER)
	if err != nil {
		return outcome{reason: pkiv1alpha1.FailedReason, message: "ACME: " + acme.StatusText(err)}, nil
	}
	return outcome{reason: pkiv1alpha1.IssuedReason, cert: pki.EncodeCert(chain...)}, nil
}
