// Package issuer implements the Issuer and ClusterIssuer controllers: they
// say whether an issuer can sign (Ready), by loading the CA key pair of a ca
// issuer and by registering the ACME account of an acme issuer (creating its
// key Secret when missing, never overwriting one it did not create). Signing
// itself is the certificaterequest controller's.
package issuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/acme"
	"github.com/converge-dev/converge/internal/issuerref"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/secretcache"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// Controller names, used with --controllers.
const (
	IssuerControllerName        = "issuer"
	ClusterIssuerControllerName = "clusterissuer"
)

// AccountKeyLabel marks an ACME account key Secret Converge created; only
// such a Secret is ever written by it.
const AccountKeyLabel = "pki.converge.dev/acme-account-key"

// +kubebuilder:rbac:groups=pki.converge.dev,resources=issuers;clusterissuers,verbs=get;list;watch
// +kubebuilder:rbac:groups=pki.converge.dev,resources=issuers/status;clusterissuers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create

// Reconciler reconciles Issuers (Cluster false) or ClusterIssuers.
type Reconciler struct {
	client.Client
	// Cluster selects ClusterIssuers.
	Cluster bool
	// ClusterResourceNamespace holds the Secrets of ClusterIssuers.
	ClusterResourceNamespace string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// ACMEAllowedDirectories are the URL prefixes of the ACME directories
	// an acme issuer may name (--acme-allowed-directories); any other is
	// Stalled without a request.
	ACMEAllowedDirectories []string
}

func (r *Reconciler) newObject() issuerref.Object {
	if r.Cluster {
		return &pkiv1alpha1.ClusterIssuer{}
	}
	return &pkiv1alpha1.Issuer{}
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	if r.Now == nil {
		r.Now = time.Now
	}
	name := IssuerControllerName
	if r.Cluster {
		name = ClusterIssuerControllerName
	}
	return ctrl.NewControllerManagedBy(mgr).Named(name).
		For(r.newObject()).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.issuersForSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Complete(r)
}

// issuersForSecret maps a Secret to the issuers that read it.
func (r *Reconciler) issuersForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	match := func(iss issuerref.Object) {
		sp := iss.GetSpec()
		if issuerref.SecretNamespace(iss, r.ClusterResourceNamespace) != o.GetNamespace() {
			return
		}
		if (sp.CA != nil && sp.CA.SecretName == o.GetName()) || (sp.ACME != nil && sp.ACME.PrivateKeySecretRef.Name == o.GetName()) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: iss.GetNamespace(), Name: iss.GetName()}})
		}
	}
	if r.Cluster {
		if o.GetNamespace() != r.ClusterResourceNamespace {
			return nil
		}
		var l pkiv1alpha1.ClusterIssuerList
		if err := r.List(ctx, &l); err != nil {
			return nil
		}
		for i := range l.Items {
			match(&l.Items[i])
		}
		return out
	}
	var l pkiv1alpha1.IssuerList
	if err := r.List(ctx, &l, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	for i := range l.Items {
		match(&l.Items[i])
	}
	return out
}

// Reconcile checks one issuer and writes its Ready condition.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	iss := r.newObject()
	if err := r.Get(ctx, req.NamespacedName, iss); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	patcher := creconcile.NewStatusPatcher(r.Client, iss)
	ready, reason, msg, err := r.check(ctx, iss)
	st := iss.GetStatus()
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	creconcile.SetCondition(&st.Conditions, iss.GetGeneration(), pkiv1alpha1.ReadyCondition, status, reason, msg)
	if reason == pkiv1alpha1.ACMEServerNotAllowedReason {
		// Only the cluster admin (the flag) or the issuer's author (the
		// spec) can help.
		creconcile.SetCondition(&st.Conditions, iss.GetGeneration(), pkiv1alpha1.StalledCondition, metav1.ConditionTrue, reason, msg)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, pkiv1alpha1.StalledCondition)
	}
	st.ObservedGeneration = iss.GetGeneration()
	if perr := patcher.Patch(ctx, iss); perr != nil {
		return ctrl.Result{}, fmt.Errorf("patching the status: %w", perr)
	}
	return ctrl.Result{}, err
}

// check returns readiness, the reason and message of Ready, and an error to
// retry with backoff (ACME servers that failed).
func (r *Reconciler) check(ctx context.Context, iss issuerref.Object) (bool, string, string, error) {
	sp := iss.GetSpec()
	ns := issuerref.SecretNamespace(iss, r.ClusterResourceNamespace)
	switch {
	case sp.SelfSigned != nil:
		return true, pkiv1alpha1.IssuerReadyReason, "self-signed issuer", nil
	case sp.CA != nil:
		var s corev1.Secret
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: sp.CA.SecretName}, &s); err != nil {
			if apierrors.IsNotFound(err) {
				return false, pkiv1alpha1.CASecretInvalidReason, fmt.Sprintf("CA Secret %s/%s not found", ns, sp.CA.SecretName), nil
			}
			return false, pkiv1alpha1.CASecretInvalidReason, err.Error(), err
		}
		chain, _, _, err := pki.LoadCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Data["ca.crt"])
		if err != nil {
			return false, pkiv1alpha1.CASecretInvalidReason, fmt.Sprintf("CA Secret %s/%s: %v", ns, sp.CA.SecretName, err), nil
		}
		if r.Now().After(chain[0].NotAfter) {
			return false, pkiv1alpha1.CASecretInvalidReason, fmt.Sprintf("CA Secret %s/%s: the CA expired at %s", ns, sp.CA.SecretName, chain[0].NotAfter.Format(time.RFC3339)), nil
		}
		return true, pkiv1alpha1.IssuerReadyReason, "signing with CA " + chain[0].Subject.String(), nil
	case sp.ACME != nil:
		return r.checkACME(ctx, iss, ns)
	}
	return false, pkiv1alpha1.CASecretInvalidReason, "no issuer type set", nil
}

func (r *Reconciler) checkACME(ctx context.Context, iss issuerref.Object, ns string) (bool, string, string, error) {
	sp := iss.GetSpec().ACME
	if !acme.DirectoryAllowed(sp.Server, r.ACMEAllowedDirectories) {
		// Checked first: nothing is created or requested for a directory
		// the admin did not allow.
		return false, pkiv1alpha1.ACMEServerNotAllowedReason, fmt.Sprintf("spec.acme.server %q is not an ACME directory the cluster admin allowed (--acme-allowed-directories: %s); no request was made",
			acme.BoundText(sp.Server, 256), strings.Join(r.ACMEAllowedDirectories, ", ")), nil
	}
	ref := sp.PrivateKeySecretRef
	keyName := ref.Key
	if keyName == "" {
		keyName = corev1.TLSPrivateKeyKey
	}
	var s corev1.Secret
	err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		k, gerr := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if gerr != nil {
			return false, pkiv1alpha1.ACMERegistrationFailedReason, gerr.Error(), gerr
		}
		pemKey, eerr := pki.EncodeKey(k, pkiv1alpha1.PKCS8)
		if eerr != nil {
			return false, pkiv1alpha1.ACMERegistrationFailedReason, "encoding the account key: " + eerr.Error(), eerr
		}
		s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ref.Name, Labels: map[string]string{AccountKeyLabel: "true", secretcache.Label: "true"}},
			Data: map[string][]byte{keyName: pemKey}}
		if cerr := r.Create(ctx, &s); cerr != nil {
			return false, pkiv1alpha1.ACMERegistrationFailedReason, "creating the account key Secret: " + cerr.Error(), cerr
		}
	case err != nil:
		return false, pkiv1alpha1.ACMERegistrationFailedReason, err.Error(), err
	}
	key, err := pki.ParseKey(s.Data[keyName])
	if err != nil {
		return false, pkiv1alpha1.ACMERegistrationFailedReason, fmt.Sprintf("account key Secret %s/%s key %s: %v", ns, ref.Name, keyName, err), nil
	}
	st := iss.GetStatus()
	hash := pki.PublicKeyHash(key.Public())
	if st.ACME != nil && st.ACME.URI != "" && st.ACME.LastPrivateKeyHash == hash && st.ACME.LastServer == sp.Server && st.ACME.LastRegisteredEmail == sp.Email {
		return true, pkiv1alpha1.IssuerReadyReason, "ACME account registered", nil
	}
	c, err := acme.NewClient(sp.Server, r.ACMEAllowedDirectories, sp.CABundle, key, "")
	if err != nil {
		return false, pkiv1alpha1.ACMERegistrationFailedReason, "spec.acme.caBundle: " + err.Error(), nil
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	uri, err := acme.Register(rctx, c, sp.Email)
	if err != nil {
		// The server's words, bounded and as text.
		return false, pkiv1alpha1.ACMERegistrationFailedReason, acme.StatusText(err), err
	}
	st.ACME = &pkiv1alpha1.ACMEIssuerStatus{URI: uri, LastPrivateKeyHash: hash, LastServer: sp.Server, LastRegisteredEmail: sp.Email}
	return true, pkiv1alpha1.IssuerReadyReason, "ACME account registered", nil
}
