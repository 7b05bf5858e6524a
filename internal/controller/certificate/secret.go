package certificate

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/secretcache"
)

// nextKeyName is the Secret holding the key of an issuance in progress.
func nextKeyName(c *pkiv1alpha1.Certificate) string {
	const suffix = "-next-key"
	n := c.Name
	if len(n)+len(suffix) > 253 {
		n = n[:253-len(suffix)]
	}
	return n + suffix
}

// pendingKeys holds the keys of issuances in progress whose issuer never
// reads the key (a ca Issuer or ClusterIssuer): in memory, by Certificate,
// instead of in a next-key Secret. This saves two writes per issuance (the
// Secret's create and delete). A key lost with the process (a crash, a
// leader change) costs one signature from the CA: the request made for it
// is replaced by one for a new key, and the Secret is only ever written
// with a certificate for the key it holds. Issuers where a lost key costs
// more (ACME orders count against rate limits), that read the key
// (selfSigned), or that are not built in keep the next-key Secret.
type pendingKeys struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]pendingKey
}

type pendingKey struct {
	uid types.UID
	key crypto.Signer
}

// get returns the key kept for c, if any.
func (p *pendingKeys) get(c *pkiv1alpha1.Certificate) crypto.Signer {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, ok := p.keys[client.ObjectKeyFromObject(c)]
	if !ok || k.uid != c.UID {
		return nil
	}
	return k.key
}

func (p *pendingKeys) put(c *pkiv1alpha1.Certificate, key crypto.Signer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		p.keys = map[types.NamespacedName]pendingKey{}
	}
	p.keys[client.ObjectKeyFromObject(c)] = pendingKey{uid: c.UID, key: key}
}

// forget drops the key kept for the Certificate named key.
func (p *pendingKeys) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.keys, key)
}

// nextKey returns the key to request a certificate for and the Secret
// holding it: the Secret's own key with rotationPolicy Never, else a new key
// kept until the certificate is written, in the next-key Secret, or in
// memory when inMemory (see pendingKeys; the Secret name is then empty).
func (r *Reconciler) nextKey(ctx context.Context, s *scope, inMemory bool) (crypto.Signer, string, error) {
	c := s.cert
	ks := pki.ResolveKey(c.Spec.PrivateKey)
	if ks.RotationPolicy == pkiv1alpha1.RotationPolicyNever && s.obs != nil && s.obs.key != nil && pki.KeyMatches(s.obs.key, ks) {
		return s.obs.key, c.Spec.SecretName, nil
	}
	name := nextKeyName(c)
	var sec corev1.Secret
	err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &sec)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, "", err
	default:
		if sec.Labels[pkiv1alpha1.NextPrivateKeyLabel] != c.Name || !metav1.IsControlledBy(&sec, c) {
			return nil, "", fmt.Errorf("secret %s exists and is not this Certificate's next-key Secret; it is never overwritten", name)
		}
		if key, err := pki.ParseKey(sec.Data[corev1.TLSPrivateKeyKey]); err == nil && pki.KeyMatches(key, ks) {
			c.Status.NextPrivateKeySecretName = name
			return key, name, nil
		}
		// A key for an older spec: replace it.
		if err := r.Delete(ctx, &sec, client.Preconditions{UID: &sec.UID}); client.IgnoreNotFound(err) != nil {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("replacing next-key Secret %s made for an older key spec", name)
	}
	if inMemory {
		if key := r.keys.get(c); key != nil && pki.KeyMatches(key, ks) {
			return key, "", nil
		}
	}
	// A new key starts an issuance over: only from the API server's latest
	// Certificate, never from a cache that has not seen this controller's
	// last status write (the next key is dropped once the Secret is
	// written, so a stale Issuing=True would otherwise mint a second key and
	// throw away the request just used). A reconcile that starts the
	// issuance has no Issuing condition to trust and has just read the
	// Secret from the API server; a Certificate older than the API
	// server's then gives a request name already taken, which is replaced
	// only after ensureCurrent (issue).
	nn := client.ObjectKeyFromObject(c)
	if gated(ks) {
		// RSA keys are made in a fair share of the CPU (keyGate), before
		// any uncached read: a Certificate waiting for its turn costs none.
		if !r.gate.acquire(nn) {
			return nil, "", errKeyWait
		}
		defer r.gate.release(nn)
	}
	if !s.startChecked && !s.trustCache {
		if err := r.ensureCurrent(ctx, c); err != nil {
			return nil, "", err
		}
	}
	key, err := pki.GenerateKey(ks)
	if err != nil {
		return nil, "", err
	}
	if inMemory {
		r.keys.put(c, key)
		return key, "", nil
	}
	pemKey, err := pki.EncodeKey(key, ks.Encoding)
	if err != nil {
		return nil, "", err
	}
	sec = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name, Labels: map[string]string{pkiv1alpha1.NextPrivateKeyLabel: c.Name, secretcache.Label: "true"}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{corev1.TLSPrivateKeyKey: pemKey},
	}
	if err := controllerutil.SetControllerReference(c, &sec, r.Scheme()); err != nil {
		return nil, "", err
	}
	if err := r.Create(ctx, &sec, client.FieldOwner(FieldManager)); err != nil {
		return nil, "", fmt.Errorf("creating next-key Secret %s: %w", name, err)
	}
	c.Status.NextPrivateKeySecretName = name
	return key, name, nil
}

// errStaleCache: the cached Certificate is older than the API server's.
var errStaleCache = errors.New("the cache has not seen the Certificate's latest version yet")

// ensureCurrent returns errStaleCache unless c is the API server's latest
// version of the Certificate (one uncached GET, on the paths that replace a
// key or a request).
func (r *Reconciler) ensureCurrent(ctx context.Context, c *pkiv1alpha1.Certificate) error {
	var live pkiv1alpha1.Certificate
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(c), &live); err != nil {
		return fmt.Errorf("reading Certificate %s: %w", c.Name, err)
	}
	if live.ResourceVersion != c.ResourceVersion {
		return errStaleCache
	}
	return nil
}

// deleteNextKey drops the next key, in memory or in the next-key Secret,
// once the issuance is done.
func (r *Reconciler) deleteNextKey(ctx context.Context, c *pkiv1alpha1.Certificate) error {
	r.keys.forget(client.ObjectKeyFromObject(c))
	if c.Status.NextPrivateKeySecretName == "" {
		return nil
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Status.NextPrivateKeySecretName}}
	if err := r.Delete(ctx, sec); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting next-key Secret: %w", err)
	}
	c.Status.NextPrivateKeySecretName = ""
	return nil
}

// desiredMetadata sets the Secret's labels, annotations and owner.
func (r *Reconciler) desiredMetadata(c *pkiv1alpha1.Certificate, sec *corev1.Secret) error {
	if sec.Labels == nil {
		sec.Labels = map[string]string{}
	}
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	if t := c.Spec.SecretTemplate; t != nil {
		maps.Copy(sec.Labels, t.Labels)
		maps.Copy(sec.Annotations, t.Annotations)
	}
	sec.Labels[pkiv1alpha1.CertificateNameLabel] = c.Name
	sec.Labels[secretcache.Label] = "true" // read on every reconcile: keep its data cached
	name, kind, group := issuerLabels(c)
	sec.Annotations[pkiv1alpha1.CertificateNameAnnotation] = c.Name
	sec.Annotations[pkiv1alpha1.IssuerNameAnnotation] = name
	sec.Annotations[pkiv1alpha1.IssuerKindAnnotation] = kind
	sec.Annotations[pkiv1alpha1.IssuerGroupAnnotation] = group
	if ptr.Deref(c.Spec.OwnSecret, r.OwnSecrets) {
		return controllerutil.SetOwnerReference(c, sec, r.Scheme())
	}
	sec.OwnerReferences = slices.DeleteFunc(sec.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == c.UID })
	if len(sec.OwnerReferences) == 0 {
		sec.OwnerReferences = nil
	}
	return nil
}

// syncSecretMetadata applies secretTemplate and ownership changes to a
// current Secret without reissuing.
func (r *Reconciler) syncSecretMetadata(ctx context.Context, s *scope) error {
	want := s.secret.DeepCopy()
	if err := r.desiredMetadata(s.cert, want); err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(want.ObjectMeta, s.secret.ObjectMeta) {
		return nil
	}
	if err := r.Update(ctx, want, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("updating Secret %s metadata: %w", want.Name, err)
	}
	r.secretWrites.Wrote(want)
	return nil
}

// writeSecret writes the signed certificate and its key, records the new
// revision and schedules the renewal.
func (r *Reconciler) writeSecret(ctx context.Context, s *scope, cr *pkiv1alpha1.CertificateRequest, key crypto.Signer, rev int32) (ctrl.Result, error) {
	c := s.cert
	chain, err := pki.ParseCerts(cr.Status.Certificate)
	if err != nil || !pki.PublicKeyMatches(chain[0], key) {
		msg := "the issuer returned a certificate that does not match the requested key"
		if err != nil {
			msg = "the issuer returned no parsable certificate: " + err.Error()
		}
		return r.recordFailure(s, cr, msg)
	}
	pemKey, err := pki.EncodeKey(key, pki.ResolveKey(c.Spec.PrivateKey).Encoding)
	if err != nil {
		return ctrl.Result{}, err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Spec.SecretName}}
	if s.secret != nil {
		sec = s.secret.DeepCopy()
	}
	if err := r.desiredMetadata(c, sec); err != nil {
		return ctrl.Result{}, err
	}
	sec.Annotations[SpecHashAnnotation] = pki.SpecHash(&c.Spec)
	sec.Type = corev1.SecretTypeTLS
	sec.Data = map[string][]byte{corev1.TLSCertKey: cr.Status.Certificate, corev1.TLSPrivateKeyKey: pemKey}
	if len(cr.Status.CA) > 0 {
		sec.Data["ca.crt"] = cr.Status.CA
	}
	switch {
	case s.secret == nil:
		err = r.Create(ctx, sec, client.FieldOwner(FieldManager))
	case equality.Semantic.DeepEqual(sec, s.secret):
		// Already written (a stale cached status asked again).
	default:
		err = r.Update(ctx, sec, client.FieldOwner(FieldManager))
	}
	if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
		// The cache was behind the Secret (another process wrote it, or
		// a person): nothing is overwritten; judge it again once the
		// cache shows it.
		return staleCache(s), nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("writing Secret %s: %w", sec.Name, err)
	}
	r.secretWrites.Wrote(sec)
	leaf := chain[0]
	c.Status.Revision = ptr.To(rev)
	c.Status.NotBefore, c.Status.NotAfter = ptr.To(metav1.NewTime(leaf.NotBefore)), ptr.To(metav1.NewTime(leaf.NotAfter))
	renewal := pki.RenewalTime(&c.Spec, leaf.NotBefore, leaf.NotAfter)
	c.Status.RenewalTime = ptr.To(metav1.NewTime(renewal))
	c.Status.FailedIssuanceAttempts, c.Status.LastFailureTime, c.Status.NextRetryTime = nil, nil, nil
	meta.RemoveStatusCondition(&c.Status.Conditions, pkiv1alpha1.IssuingCondition)
	r.setReady(c, leaf)
	r.Recorder.Eventf(c, cr, corev1.EventTypeNormal, "Issued", "Issue", "Certificate issued (revision %d), valid until %s", rev, leaf.NotAfter.UTC().Format("2006-01-02T15:04:05Z"))
	if err := r.deleteNextKey(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.prune(ctx, c, rev); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: renewal.Sub(s.now) + 1e9}, nil
}

// prune deletes the requests beyond revisionHistoryLimit and failed attempts
// of finished revisions.
func (r *Reconciler) prune(ctx context.Context, c *pkiv1alpha1.Certificate, rev int32) error {
	limit := ptr.Deref(c.Spec.RevisionHistoryLimit, 1)
	var l pkiv1alpha1.CertificateRequestList
	if err := r.List(ctx, &l, client.InNamespace(c.Namespace), client.MatchingLabels{pkiv1alpha1.CertificateNameLabel: c.Name}); err != nil {
		return err
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	for i := range l.Items {
		cr := &l.Items[i]
		if !metav1.IsControlledBy(cr, c) {
			continue
		}
		n64, err := strconv.ParseInt(cr.Annotations[pkiv1alpha1.RevisionAnnotation], 10, 32)
		if err != nil {
			continue
		}
		failed, _ := requestFailed(cr)
		if n := int32(n64); n <= rev-limit || (n <= rev && failed) {
			if err := r.Delete(ctx, cr); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("pruning CertificateRequest %s: %w", cr.Name, err)
			}
		}
	}
	return nil
}
