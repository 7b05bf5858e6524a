// Package certificate implements the Certificate controller: it keeps a
// kubernetes.io/tls Secret holding a key pair that matches the
// Certificate's spec and is not due for renewal. It decides whether to issue
// (policy.go), makes the key, creates one CertificateRequest per attempt
// (signed by whichever controller owns issuerRef.group), writes the Secret
// only once a signed certificate for the current key and spec exists, and
// schedules the renewal (a requeue at status.renewalTime; nothing polls).
// Failed attempts back off 1h·2^(n-1), at most 32h. A Secret it did not
// write is never overwritten (SecretNotOwned).
package certificate

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/issuerref"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the name used with --controllers.
const ControllerName = "certificate"

// FieldManager is the field manager of every write this controller makes.
const FieldManager = "converge-certificate"

// Backoff defaults (as cert-manager): the n-th consecutive failure waits
// DefaultBackoffBase·2^(n-1), at most DefaultBackoffMax.
const (
	DefaultBackoffBase = time.Hour
	DefaultBackoffMax  = 32 * time.Hour
)

const (
	secretNameIndex = "spec.secretName"
	issuerIndex     = "spec.issuerRef"
)

// +kubebuilder:rbac:groups=pki.converge.dev,resources=certificates,verbs=get;list;watch
// +kubebuilder:rbac:groups=pki.converge.dev,resources=certificates/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=pki.converge.dev,resources=certificaterequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=pki.converge.dev,resources=issuers;clusterissuers,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// Reconciler reconciles Certificates.
type Reconciler struct {
	client.Client
	// APIReader reads around the cache where a decision must not rest on
	// the cache alone: before an issuance of an issuer whose requests cost
	// (ACME, external issuers) starts or ends. See ownWrites.
	APIReader client.Reader
	// Recorder emits Events.
	Recorder events.EventRecorder
	// OwnSecrets sets an ownerReference on every Secret
	// (--certificate-owns-secret); spec.ownSecret overrides it.
	OwnSecrets bool
	// BackoffBase and BackoffMax shape the retry delay after failures.
	BackoffBase, BackoffMax time.Duration
	// MaxRSAKeySize is the largest RSA key generated
	// (--max-rsa-key-size); pki.DefaultMaxRSAKeySize when zero. A
	// Certificate asking for more is Stalled (KeySizeNotAllowed).
	MaxRSAKeySize int
	// Contracts answers, from the manager's cache, whether the kind of an
	// issuerRef of another group declares the issuer contract;
	// SetupWithManager fills it.
	Contracts pcontract.Checker
	// MaxConcurrentReconciles defaults to 8.
	MaxConcurrentReconciles int
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	keys pendingKeys
	// gate shares RSA key generation fairly between namespaces.
	gate *keyGate
	// KeyGenerators is how many RSA keys are made at once (one per
	// namespace at most); GOMAXPROCS, at least 2, when 0.
	KeyGenerators int
	// certWrites and secretWrites hold this controller's last status write
	// of each Certificate and write of each Secret until the cache shows
	// them: a reconcile never acts on a cached object older than its own
	// last write (a second issuance from a status that does not show the
	// first). With them, an issuance from a ca or selfSigned issuer needs
	// no uncached read; see docs/certificates.md, "API writes per
	// issuance".
	certWrites, secretWrites *creconcile.OwnWrites
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder(ControllerName)
	r.Contracts = pcontract.Checker{Reader: mgr.GetCache(), Mapper: mgr.GetRESTMapper()}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.BackoffBase == 0 {
		r.BackoffBase = DefaultBackoffBase
	}
	if r.BackoffMax == 0 {
		r.BackoffMax = DefaultBackoffMax
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 8
	}
	r.gate = newKeyGate(r.KeyGenerators)
	if err := addMetrics(mgr); err != nil {
		return err
	}
	ctx := context.Background() //nolint:forbidigo // index registration has no request context
	r.certWrites, r.secretWrites = creconcile.NewOwnWrites(0), creconcile.NewOwnWrites(0)
	for _, t := range []struct {
		w   *creconcile.OwnWrites
		obj client.Object
	}{{r.certWrites, &pkiv1alpha1.Certificate{}}, {r.secretWrites, &corev1.Secret{}}} {
		if err := t.w.Track(ctx, mgr.GetCache(), t.obj); err != nil {
			return err
		}
	}
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &pkiv1alpha1.Certificate{}, secretNameIndex, func(o client.Object) []string {
		return []string{o.(*pkiv1alpha1.Certificate).Spec.SecretName}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &pkiv1alpha1.Certificate{}, issuerIndex, func(o client.Object) []string {
		ref := o.(*pkiv1alpha1.Certificate).Spec.IssuerRef
		return []string{issuerref.Kind(ref) + "/" + ref.Name}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named(ControllerName).
		For(&pkiv1alpha1.Certificate{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, issuingChanged{}))).
		Owns(&pkiv1alpha1.CertificateRequest{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.certificatesForSecret)).
		Watches(&pkiv1alpha1.Issuer{}, handler.EnqueueRequestsFromMapFunc(r.certificatesForIssuer(issuerref.IssuerKind))).
		Watches(&pkiv1alpha1.ClusterIssuer{}, handler.EnqueueRequestsFromMapFunc(r.certificatesForIssuer(issuerref.ClusterIssuerKind))).
		WatchesRawSource(source.Channel(r.gate.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// issuingChanged passes status updates that set Issuing (`converge cert
// renew`), which the generation predicate would drop.
type issuingChanged struct{ predicate.Funcs }

func (issuingChanged) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*pkiv1alpha1.Certificate)
	n, ok2 := e.ObjectNew.(*pkiv1alpha1.Certificate)
	return ok1 && ok2 && !meta.IsStatusConditionTrue(o.Status.Conditions, pkiv1alpha1.IssuingCondition) &&
		meta.IsStatusConditionTrue(n.Status.Conditions, pkiv1alpha1.IssuingCondition)
}

// certificatesForSecret maps a Secret to the Certificates naming it in
// spec.secretName (a foreign Secret deleted, ours edited) and to the one its
// annotation names.
func (r *Reconciler) certificatesForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var l pkiv1alpha1.CertificateList
	if err := r.List(ctx, &l, client.InNamespace(o.GetNamespace()), client.MatchingFields{secretNameIndex: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(l.Items)+1)
	for i := range l.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&l.Items[i])})
	}
	if n := o.GetAnnotations()[pkiv1alpha1.CertificateNameAnnotation]; n != "" {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: n}})
	}
	return out
}

func (r *Reconciler) certificatesForIssuer(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		opts := []client.ListOption{client.MatchingFields{issuerIndex: kind + "/" + o.GetName()}}
		if kind == issuerref.IssuerKind {
			opts = append(opts, client.InNamespace(o.GetNamespace()))
		}
		var l pkiv1alpha1.CertificateList
		if err := r.List(ctx, &l, opts...); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range l.Items {
			c := &l.Items[i]
			if issuerref.IsBuiltIn(c.Spec.IssuerRef) && !meta.IsStatusConditionTrue(c.Status.Conditions, pkiv1alpha1.ReadyCondition) ||
				meta.IsStatusConditionTrue(c.Status.Conditions, pkiv1alpha1.IssuingCondition) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			}
		}
		return out
	}
}

// Reconcile drives one Certificate.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	var cert pkiv1alpha1.Certificate
	if err := r.Get(ctx, req.NamespacedName, &cert); err != nil {
		if apierrors.IsNotFound(err) {
			r.keys.forget(req.NamespacedName)
			r.gate.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cert.DeletionTimestamp.IsZero() {
		r.keys.forget(req.NamespacedName)
		r.gate.forget(req.NamespacedName)
		return ctrl.Result{}, nil // the requests and the key Secret are owned: garbage collection removes them
	}
	if r.certWrites.Behind(req.NamespacedName, &cert) {
		// The cache has not shown this controller's last status write yet:
		// whatever this reconcile would decide from it, it decided before.
		return ctrl.Result{RequeueAfter: staleRequeue}, nil
	}
	patcher := creconcile.NewStatusPatcher(r.Client, &cert)
	s := &scope{cert: &cert, now: r.Now()}
	defer func() {
		if s.skipStatus && retErr == nil {
			return
		}
		cert.Status.ObservedGeneration = cert.Generation
		rv := cert.ResourceVersion
		if err := patcher.Patch(ctx, &cert); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("patching the status: %w", err))
		} else if cert.ResourceVersion != rv {
			r.certWrites.Wrote(&cert)
		}
	}()
	return r.reconcileNormal(ctx, s)
}

// setCondition sets a condition for the current generation.
func setCondition(c *pkiv1alpha1.Certificate, t string, status metav1.ConditionStatus, reason, msg string) {
	creconcile.SetCondition(&c.Status.Conditions, c.Generation, t, status, reason, msg)
}
