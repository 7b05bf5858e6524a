package certificate

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
	"github.com/converge-dev/converge/internal/issuerref"
	"github.com/converge-dev/converge/internal/pki"
	"github.com/converge-dev/converge/internal/sharding"
	pcontract "github.com/converge-dev/converge/pkg/contract"
)

// scope is what one reconcile read and decided.
type scope struct {
	cert   *pkiv1alpha1.Certificate
	now    time.Time
	secret *corev1.Secret
	obs    *observed
	// secretValid: the Secret serves a valid certificate while a new one is
	// issued (renewal, manual trigger), so Ready stays True.
	secretValid bool
	why         string
	// signsAtOnce: the issuer is a built-in ca or selfSigned one, whose
	// signer writes the request's status as soon as it sees it.
	signsAtOnce bool
	// hadReady: the Certificate had a Ready condition when read.
	hadReady bool
	// skipStatus: write no status in this reconcile (see awaitSigner).
	skipStatus bool
	// startChecked: this reconcile starts an issuance (no Issuing
	// condition, no request of the next revision) and read the Secret from
	// the API server to do so.
	startChecked bool
	// trustCache: the issuance rests on the cache and this controller's
	// own-write records, without uncached reads (trustsCache).
	trustCache bool
}

// errKeyWait: the key generator has no slot for this Certificate's
// namespace now (keyGate); it is woken when one frees.
var errKeyWait = errors.New("waiting for a key generation slot")

// keyWaitRequeue is the fallback wake-up of a Certificate waiting for a
// key generation slot, should its wake-up be lost.
const keyWaitRequeue = 5 * time.Second

// staleRequeue is how soon a reconcile that found the cache behind looks
// again.
const staleRequeue = 200 * time.Millisecond

// trustsCache says whether an issuance for c may rest on the cache and the
// controller's records of its own writes (Reconciler.certWrites and
// secretWrites) alone, without an uncached read before it starts and before
// it ends: when c's issuer is a built-in ca or selfSigned one, whose
// signature costs nothing. The cache can then still be behind a write of
// another process (a previous leader's last issuance, a Secret created at
// the same moment as the Certificate); the worst that costs is one
// signature more, and a Secret is never overwritten from a stale read (its
// create or update fails, and the reconcile looks again). An ACME order
// counts against the CA's rate limits and an external issuer's cost is
// unknown: those issuances read the API server first.
func (r *Reconciler) trustsCache(ctx context.Context, c *pkiv1alpha1.Certificate) bool {
	ref := c.Spec.IssuerRef
	if !issuerref.IsBuiltIn(ref) {
		return false
	}
	iss, err := issuerref.Get(ctx, r.Client, c.Namespace, ref)
	if err != nil {
		return false
	}
	spec := iss.GetSpec()
	return spec.CA != nil || spec.SelfSigned != nil
}

// signerGrace is how long a request of an issuer that signs at once may
// have no status before the Certificate reports that it waits for it.
const signerGrace = 5 * time.Second

// wait records what the issuance waits for: on Issuing, and on Ready when the
// Secret is not usable.
func (s *scope) wait(reason, msg string) {
	setCondition(s.cert, pkiv1alpha1.IssuingCondition, metav1.ConditionTrue, reason, s.why+": "+msg)
	if !s.secretValid {
		setCondition(s.cert, pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, reason, msg)
	}
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cert
	var sec corev1.Secret
	switch err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.SecretName}, &sec); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading Secret %s: %w", c.Spec.SecretName, err)
	default:
		s.secret = &sec
	}
	var cached client.Object
	if s.secret != nil {
		cached = s.secret
	}
	if r.secretWrites.Behind(types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.SecretName}, cached) {
		return staleCache(s), nil // the cache has not shown the Secret this controller just wrote
	}
	if s.secret != nil && !owned(c, s.secret) {
		msg := fmt.Sprintf("Secret %q exists and was not written for this Certificate (its %s annotation does not name it); it is never overwritten: delete it or choose another spec.secretName",
			c.Spec.SecretName, pkiv1alpha1.CertificateNameAnnotation)
		setCondition(c, pkiv1alpha1.ReadyCondition, metav1.ConditionFalse, pkiv1alpha1.SecretNotOwnedReason, msg)
		setCondition(c, pkiv1alpha1.StalledCondition, metav1.ConditionTrue, pkiv1alpha1.SecretNotOwnedReason, msg)
		meta.RemoveStatusCondition(&c.Status.Conditions, pkiv1alpha1.IssuingCondition)
		return ctrl.Result{}, nil
	}
	meta.RemoveStatusCondition(&c.Status.Conditions, pkiv1alpha1.StalledCondition)
	s.hadReady = meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition) != nil
	reason, msg, obs := evaluate(c, s.secret, s.now)
	issuing := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.IssuingCondition)
	underway := issuing != nil && issuing.Status == metav1.ConditionTrue
	if reason != "" && !underway {
		// The request of this revision exists: an issuance under way, whose
		// Issuing condition was not written (awaitSigner).
		var err error
		if underway, err = r.requestUnderway(ctx, c); err != nil {
			return ctrl.Result{}, err
		}
	}
	s.trustCache = r.trustsCache(ctx, c)
	if reason != "" && reason != pkiv1alpha1.RenewingReason && !underway && !s.trustCache {
		// Before starting an issuance whose request costs, look past the
		// cache: it may not have seen a Secret another process (a
		// previous leader) just wrote.
		var live corev1.Secret
		switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.SecretName}, &live); {
		case apierrors.IsNotFound(err):
			s.secret = nil
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("reading Secret %s: %w", c.Spec.SecretName, err)
		default:
			s.secret = &live
			if !owned(c, s.secret) {
				return ctrl.Result{RequeueAfter: time.Second}, nil // seen as foreign next time, from the cache
			}
		}
		reason, msg, obs = evaluate(c, s.secret, s.now)
		s.startChecked = true
	}
	s.obs = obs
	if reason == "" || reason == pkiv1alpha1.RenewingReason {
		s.secretValid = true
		leaf := obs.chain[0]
		c.Status.NotBefore, c.Status.NotAfter = ptr.To(metav1.NewTime(leaf.NotBefore)), ptr.To(metav1.NewTime(leaf.NotAfter))
		c.Status.RenewalTime = ptr.To(metav1.NewTime(pki.RenewalTime(&c.Spec, leaf.NotBefore, leaf.NotAfter)))
	} else {
		c.Status.NotBefore, c.Status.NotAfter, c.Status.RenewalTime = nil, nil, nil
	}
	if reason == "" && (issuing == nil || issuing.Status != metav1.ConditionTrue) {
		return r.upToDate(ctx, s)
	}
	switch {
	case issuing != nil && issuing.Status == metav1.ConditionTrue && reason == "":
		reason = issuing.Reason // manually triggered, or an issuance under way
	case !underway:
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, reason, "Issue", "Issuing certificate: %s", msg)
	}
	s.why = reason
	if issuing != nil && issuing.Status == metav1.ConditionTrue {
		s.why, _ = cutReason(issuing.Message, reason)
	}
	if s.secretValid {
		setCondition(c, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason, "Certificate is up to date and has not expired; a new one is being issued")
	}
	return r.issue(ctx, s)
}

// setReady sets Ready=True for a current leaf. When the spec asks for a
// renewal before the floor (pki.RenewalClamped), the message says when the
// renewal is instead, and a RenewalClamped Warning Event is recorded once
// per leaf (when the message changes).
func (r *Reconciler) setReady(c *pkiv1alpha1.Certificate, leaf *x509.Certificate) {
	msg := "Certificate is up to date and has not expired"
	if pki.RenewalClamped(&c.Spec, leaf.NotBefore, leaf.NotAfter) {
		rt := pki.RenewalTime(&c.Spec, leaf.NotBefore, leaf.NotAfter)
		msg += fmt.Sprintf("; the spec asks to renew before a third of its lifetime (%s) has passed: renewal at %s instead (status.renewalTime), the earliest allowed",
			leaf.NotAfter.Sub(leaf.NotBefore).Round(time.Second), rt.UTC().Format(time.RFC3339))
		if cur := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition); cur == nil || cur.Message != msg {
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, RenewalClampedReason, "Schedule", "%s", msg)
		}
	}
	setCondition(c, pkiv1alpha1.ReadyCondition, metav1.ConditionTrue, pkiv1alpha1.CertificateReadyReason, msg)
}

// cutReason returns the first reason recorded in an Issuing message
// ("<why>: <detail>"), or fallback.
func cutReason(msg, fallback string) (why, detail string) {
	if why, detail, ok := strings.Cut(msg, ":"); ok {
		return why, detail
	}
	return fallback, msg
}

// upToDate records a current Secret and schedules its renewal.
func (r *Reconciler) upToDate(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cert
	r.setReady(c, s.obs.chain[0])
	meta.RemoveStatusCondition(&c.Status.Conditions, pkiv1alpha1.IssuingCondition)
	c.Status.FailedIssuanceAttempts, c.Status.LastFailureTime, c.Status.NextRetryTime = nil, nil, nil
	if err := r.syncSecretMetadata(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.deleteNextKey(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: c.Status.RenewalTime.Sub(s.now) + time.Second}, nil
}

// issue moves the issuance one step: back off, check the issuer, make the
// key, create or read the request, write the Secret.
func (r *Reconciler) issue(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.cert
	if err := pki.RSAKeySizeAllowed(pki.ResolveKey(c.Spec.PrivateKey), r.MaxRSAKeySize); err != nil {
		// Checked before anything costs: no key, no request.
		msg := "spec.privateKey.size: " + err.Error()
		s.wait(pkiv1alpha1.KeySizeNotAllowedReason, msg)
		setCondition(c, pkiv1alpha1.StalledCondition, metav1.ConditionTrue, pkiv1alpha1.KeySizeNotAllowedReason, msg)
		return ctrl.Result{}, nil
	}
	if stalled, err := r.checkIssuerContract(ctx, s); stalled || err != nil {
		return ctrl.Result{}, err
	}
	n := ptr.Deref(c.Status.FailedIssuanceAttempts, 0)
	if n > 0 && c.Status.LastFailureTime != nil {
		if older, err := r.failedForOlderSpec(ctx, c, n); err != nil {
			return ctrl.Result{}, err
		} else if older {
			// The failure was for a request this spec would not make (new
			// names, issuer, key, duration ...): try the new one now, as
			// cert-manager does. Edits that change no request (labels,
			// secretTemplate) keep the backoff.
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, BackoffResetReason, "Issue",
				"The spec changed since the last failed attempt (%d): retrying now", n)
			c.Status.FailedIssuanceAttempts, c.Status.LastFailureTime, c.Status.NextRetryTime = nil, nil, nil
			// Write the reset first and go on only once the cache shows it:
			// the failed request is what tells a spec change apart, so it
			// must not be replaced while a stale read could still count it.
			s.wait(pkiv1alpha1.RequestPendingReason, "the spec changed since the last failed attempt; retrying now")
			return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
		}
	}
	if n > 0 && c.Status.LastFailureTime != nil {
		next := c.Status.LastFailureTime.Add(backoff(n, r.BackoffBase, r.BackoffMax))
		c.Status.NextRetryTime = ptr.To(metav1.NewTime(next))
		if s.now.Before(next) {
			detail := fmt.Sprintf("%d failed attempt(s); next try at %s", n, next.UTC().Format(time.RFC3339))
			if cur := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.IssuingCondition); cur != nil && cur.Reason == pkiv1alpha1.IssuanceFailedReason {
				_, detail = cutReason(cur.Message, "") // keep the issuer's message
				detail = strings.TrimSpace(detail)
			}
			s.wait(pkiv1alpha1.IssuanceFailedReason, detail)
			return ctrl.Result{RequeueAfter: next.Sub(s.now)}, nil
		}
	}
	ref := c.Spec.IssuerRef
	keyInMemory := false
	if issuerref.IsBuiltIn(ref) {
		iss, err := issuerref.Get(ctx, r.Client, c.Namespace, ref)
		if apierrors.IsNotFound(err) {
			s.wait(pkiv1alpha1.IssuerNotFoundReason, fmt.Sprintf("%s %q not found", issuerref.Kind(ref), ref.Name))
			return ctrl.Result{}, nil
		} else if err != nil {
			return ctrl.Result{}, err
		}
		if ok, why := issuerref.Ready(iss); !ok {
			s.wait(pkiv1alpha1.IssuerNotReadyReason, fmt.Sprintf("%s %q is not ready: %s", issuerref.Kind(ref), ref.Name, why))
			return ctrl.Result{}, nil
		}
		// A ca issuer signs at once and never reads the key: it stays in
		// memory (pendingKeys), not in a next-key Secret.
		keyInMemory = iss.GetSpec().CA != nil
		s.signsAtOnce = iss.GetSpec().CA != nil || iss.GetSpec().SelfSigned != nil
	}
	key, keySecret, err := r.nextKey(ctx, s, keyInMemory)
	switch {
	case errors.Is(err, errStaleCache):
		return staleCache(s), nil
	case errors.Is(err, errKeyWait):
		s.wait(pkiv1alpha1.RequestPendingReason, "waiting for a turn to generate the private key (RSA keys are made one per namespace at a time)")
		return ctrl.Result{RequeueAfter: keyWaitRequeue}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	rev := ptr.Deref(c.Status.Revision, 0) + 1
	name := requestName(c.Name, rev, n)
	var cr pkiv1alpha1.CertificateRequest
	switch err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &cr); {
	case apierrors.IsNotFound(err):
		if err := r.createRequest(ctx, s, name, rev, key, keySecret); err != nil {
			return ctrl.Result{}, err
		}
		if s.mayAwaitSigner() {
			return awaitSigner(s, signerGrace), nil
		}
		s.wait(pkiv1alpha1.RequestPendingReason, "created CertificateRequest "+name)
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	if !metav1.IsControlledBy(&cr, c) || cr.Annotations[SpecHashAnnotation] != pki.SpecHash(&c.Spec) || !requestForKey(&cr, key) {
		// A request for an older spec or key: replace it, judged on the
		// latest Certificate only.
		if err := r.ensureCurrent(ctx, c); errors.Is(err, errStaleCache) {
			return staleCache(s), nil
		} else if err != nil {
			return ctrl.Result{}, err
		}
		if metav1.IsControlledBy(&cr, c) {
			if err := r.Delete(ctx, &cr, client.Preconditions{UID: &cr.UID}); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
		}
		s.wait(pkiv1alpha1.RequestPendingReason, "replacing CertificateRequest "+name+" made for an older spec or key")
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if failed, msg := requestFailed(&cr); failed {
		return r.recordFailure(s, &cr, msg)
	}
	ready := meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)
	if age := s.now.Sub(cr.CreationTimestamp.Time); ready == nil && s.mayAwaitSigner() && age < signerGrace {
		return awaitSigner(s, signerGrace-age), nil
	}
	if ready == nil || ready.Status != metav1.ConditionTrue {
		msg := "waiting for CertificateRequest " + name + " to be signed"
		if ready != nil && ready.Message != "" {
			msg += ": " + ready.Message
		}
		s.wait(pkiv1alpha1.RequestPendingReason, msg)
		return ctrl.Result{}, nil
	}
	// Recording a revision ends the issuance: only from a Certificate that
	// shows every status write made so far. A reconcile that started from
	// a cached Certificate older than its Issuing condition never saw that
	// condition, so its status patch could not remove it; the next
	// reconcile would take the leftover Issuing=True for a new issuance and
	// issue a second time. This controller's own writes are covered by
	// certWrites (Reconcile); where a second issuance costs, the API
	// server's latest Certificate is read too.
	if !s.trustCache {
		if err := r.ensureCurrent(ctx, c); errors.Is(err, errStaleCache) {
			return staleCache(s), nil
		} else if err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.writeSecret(ctx, s, &cr, key, rev)
}

// checkIssuerContract stalls the issuance (IssuerContractNotDeclared) when
// spec.issuerRef names a kind of another group that does not declare the
// issuer contract: a namespaced kind whose CRD carries the label
// contract.converge.dev/issuer. Checked before anything costs or is
// written: no key, no next-key Secret, no CertificateRequest; nothing of
// the named kind is read or watched.
func (r *Reconciler) checkIssuerContract(ctx context.Context, s *scope) (bool, error) {
	ref := s.cert.Spec.IssuerRef
	if issuerref.IsBuiltIn(ref) {
		return false, nil
	}
	gvk := schema.GroupVersionKind{Group: ref.Group, Kind: ref.Kind}
	err := r.Contracts.Check(ctx, gvk, pcontract.Issuer)
	if err == nil {
		return false, nil
	}
	if !pcontract.IsNotDeclared(err) {
		return false, fmt.Errorf("checking the issuer contract of %s: %w", gvk.GroupKind(), err)
	}
	msg := "spec.issuerRef.kind: " + err.Error() + "; no key is made and no CertificateRequest is created" +
		" (an issuer kind's CRD declares it with the label " + pcontract.Label(pcontract.Issuer) + "=" + pcontract.Version + ")"
	s.wait(pkiv1alpha1.IssuerContractNotDeclaredReason, msg)
	setCondition(s.cert, pkiv1alpha1.StalledCondition, metav1.ConditionTrue, pkiv1alpha1.IssuerContractNotDeclaredReason, msg)
	return true, nil
}

// requestName is the name of the request for revision rev after n failed
// attempts: <cert>-<rev>[-<n>].
func requestName(cert string, rev, n int32) string {
	suffix := "-" + strconv.Itoa(int(rev))
	if n > 0 {
		suffix += "-" + strconv.Itoa(int(n))
	}
	if len(cert)+len(suffix) > 253 {
		cert = cert[:253-len(suffix)]
	}
	return cert + suffix
}

func requestForKey(cr *pkiv1alpha1.CertificateRequest, key crypto.Signer) bool {
	csr, err := pki.ParseCSR(cr.Spec.Request)
	return err == nil && pki.PublicKeyHash(csr.PublicKey) == pki.PublicKeyHash(key.Public())
}

// requestFailed says whether a request ended without a certificate.
func requestFailed(cr *pkiv1alpha1.CertificateRequest) (bool, string) {
	for _, t := range []string{pkiv1alpha1.DeniedCondition, pkiv1alpha1.InvalidRequestCondition} {
		if cond := meta.FindStatusCondition(cr.Status.Conditions, t); cond != nil && cond.Status == metav1.ConditionTrue {
			return true, cond.Reason + ": " + cond.Message
		}
	}
	ready := meta.FindStatusCondition(cr.Status.Conditions, pkiv1alpha1.ReadyCondition)
	if ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == pkiv1alpha1.FailedReason {
		return true, ready.Message
	}
	return false, ""
}

// BackoffResetReason is the Event reason when a spec change ends a backoff.
const BackoffResetReason = "BackoffReset"

// RenewalClampedReason is the Warning Event reason when renewBefore (or
// renewBeforePercentage) asks for a renewal before a third of the
// certificate's lifetime has passed, and the renewal is scheduled at that
// floor instead (pki.MaxRenewBefore).
const RenewalClampedReason = "RenewalClamped"

// failedForOlderSpec reports whether the request whose failure started the
// current backoff (the one before attempt n) was made for another request
// spec than the Certificate's current one.
func (r *Reconciler) failedForOlderSpec(ctx context.Context, c *pkiv1alpha1.Certificate, n int32) (bool, error) {
	rev := ptr.Deref(c.Status.Revision, 0) + 1
	var cr pkiv1alpha1.CertificateRequest
	switch err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: requestName(c.Name, rev, n-1)}, &cr); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the last failed CertificateRequest: %w", err)
	}
	return metav1.IsControlledBy(&cr, c) && cr.Annotations[SpecHashAnnotation] != pki.SpecHash(&c.Spec), nil
}

// recordFailure counts a failed request once: the next attempt has another
// request name, so this request is never counted again.
func (r *Reconciler) recordFailure(s *scope, cr *pkiv1alpha1.CertificateRequest, msg string) (ctrl.Result, error) {
	c := s.cert
	n := ptr.Deref(c.Status.FailedIssuanceAttempts, 0) + 1
	at := s.now
	if cr.Status.FailureTime != nil {
		at = cr.Status.FailureTime.Time
	}
	c.Status.FailedIssuanceAttempts = ptr.To(n)
	c.Status.LastFailureTime = ptr.To(metav1.NewTime(at))
	next := at.Add(backoff(n, r.BackoffBase, r.BackoffMax))
	c.Status.NextRetryTime = ptr.To(metav1.NewTime(next))
	s.wait(pkiv1alpha1.IssuanceFailedReason, fmt.Sprintf("CertificateRequest %s failed: %s; attempt %d, next try at %s", cr.Name, msg, n, next.UTC().Format(time.RFC3339)))
	r.Recorder.Eventf(c, cr, corev1.EventTypeWarning, pkiv1alpha1.IssuanceFailedReason, "Issue", "CertificateRequest %s failed: %s", cr.Name, msg)
	return ctrl.Result{RequeueAfter: next.Sub(s.now)}, nil
}

// createRequest creates the CertificateRequest for key.
func (r *Reconciler) createRequest(ctx context.Context, s *scope, name string, rev int32, key crypto.Signer, keySecret string) error {
	c := s.cert
	csr, err := pki.BuildCSR(&c.Spec, key)
	if err != nil {
		return err
	}
	cr := &pkiv1alpha1.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name,
			Labels: map[string]string{pkiv1alpha1.CertificateNameLabel: c.Name},
			Annotations: map[string]string{pkiv1alpha1.CertificateNameAnnotation: c.Name, pkiv1alpha1.RevisionAnnotation: strconv.Itoa(int(rev)),
				SpecHashAnnotation: pki.SpecHash(&c.Spec)}},
		Spec: pkiv1alpha1.CertificateRequestSpec{Request: csr, IssuerRef: c.Spec.IssuerRef, Duration: &metav1.Duration{Duration: pki.Duration(&c.Spec)},
			Usages: c.Spec.Usages, IsCA: c.Spec.IsCA},
	}
	if keySecret != "" { // empty: the key is in memory (pendingKeys)
		cr.Annotations[pkiv1alpha1.PrivateKeySecretAnnotation] = keySecret
	}
	// The request is a sharded kind: it goes to the Certificate's shard, or
	// that shard's CertificateRequest controller would never see it.
	if shard, ok := c.Labels[sharding.Label]; ok {
		cr.Labels[sharding.Label] = shard
	}
	if err := controllerutil.SetControllerReference(c, cr, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, cr, client.FieldOwner(FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CertificateRequest %s: %w", name, err)
	}
	return nil
}

// staleCache ends a reconcile that found its Certificate older than the
// API server's: it writes nothing (a status computed from a stale object
// would only conflict) and looks again shortly.
func staleCache(s *scope) ctrl.Result {
	s.skipStatus = true
	return ctrl.Result{RequeueAfter: staleRequeue}
}

// mayAwaitSigner says whether this reconcile may leave the status as it
// is until the signer answers (awaitSigner): for an issuer that signs at
// once, when the status says nothing wrong by staying (a new Certificate,
// which has no Ready condition yet; a renewal, where Ready stays True).
// Any other issuance (a spec change, a deleted or edited Secret, after a
// failure) writes Ready=False with its reason at once.
func (s *scope) mayAwaitSigner() bool {
	return s.signsAtOnce && (!s.hadReady || s.secretValid)
}

// awaitSigner ends a reconcile that would only report "request pending"
// for a request of an issuer that signs at once, before its signer wrote
// the request's status: the Certificate's status is not written (one write
// less per issuance; the next reconcile writes the outcome, Ready with the
// Secret or the signer's reason). The signer's status write wakes the
// Certificate (it owns the request); the requeue after wait reports
// RequestPending should the signer not run.
func awaitSigner(s *scope, wait time.Duration) ctrl.Result {
	s.skipStatus = true
	return ctrl.Result{RequeueAfter: wait}
}

// requestUnderway reports whether the request of the next revision exists
// for the current spec and has not failed: an issuance under way, even
// when no Issuing condition was written for it (awaitSigner). Read from
// the cache.
func (r *Reconciler) requestUnderway(ctx context.Context, c *pkiv1alpha1.Certificate) (bool, error) {
	name := requestName(c.Name, ptr.Deref(c.Status.Revision, 0)+1, ptr.Deref(c.Status.FailedIssuanceAttempts, 0))
	var cr pkiv1alpha1.CertificateRequest
	switch err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &cr); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading CertificateRequest %s: %w", name, err)
	}
	failed, _ := requestFailed(&cr)
	return metav1.IsControlledBy(&cr, c) && cr.Annotations[SpecHashAnnotation] == pki.SpecHash(&c.Spec) && !failed, nil
}
