package certificaterequest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/acme"
)

// HTTP01ChallengeLabel marks the ConfigMaps that carry pending HTTP-01
// answers between replicas (ConfigMapShared).
const HTTP01ChallengeLabel = "pki.converge.dev/acme-http01-challenge"

// staleChallengeAge is when a challenge ConfigMap is surely left over from
// a crash: no ACME order waits that long (the ACME timeout is minutes).
const staleChallengeAge = time.Hour

// ConfigMapShared publishes HTTP-01 answers as one ConfigMap per pending
// challenge in the manager's own namespace, so that every replica behind the
// acme-http01 Service answers, not only the leader that ordered. A replica
// that does not hold a token reads its ConfigMap directly from the API
// server (the Solver bounds how often), so an answer published before the
// CA is told to validate is found at once, with no cache to wait for.
// Key authorizations are not secret (they are served to anyone who asks),
// and the namespace is the manager's, which tenants cannot write.
type ConfigMapShared struct {
	// Client writes the ConfigMaps.
	Client client.Client
	// Reader reads them uncached.
	Reader client.Reader
	// Namespace is the manager's namespace.
	Namespace string
}

var _ acme.Shared = ConfigMapShared{}

// challengeName is the ConfigMap of token: tokens are base64url, not
// object names.
func challengeName(token string) string {
	h := sha256.Sum256([]byte(token))
	return "acme-http01-" + hex.EncodeToString(h[:16])
}

// Publish creates (or updates) token's ConfigMap, and deletes challenge
// ConfigMaps a crash left behind.
func (c ConfigMapShared) Publish(ctx context.Context, token, keyAuth string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: challengeName(token),
		Labels: map[string]string{HTTP01ChallengeLabel: "true", "app.kubernetes.io/managed-by": "converge"}},
		Data: map[string]string{"token": token, "keyAuthorization": keyAuth}}
	err := c.Client.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		err = c.Client.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", c.Namespace, cm.Name, err)
	}
	var all corev1.ConfigMapList
	if err := c.Reader.List(ctx, &all, client.InNamespace(c.Namespace), client.MatchingLabels{HTTP01ChallengeLabel: "true"}); err != nil {
		return nil // the sweep is housekeeping; the answer is published
	}
	for i := range all.Items {
		old := &all.Items[i]
		if time.Since(old.CreationTimestamp.Time) > staleChallengeAge {
			_ = c.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID})
		}
	}
	return nil
}

// Withdraw deletes token's ConfigMap.
func (c ConfigMapShared) Withdraw(ctx context.Context, token string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: challengeName(token)}}
	if err := c.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ConfigMap %s/%s: %w", c.Namespace, cm.Name, err)
	}
	return nil
}

// Lookup reads token's ConfigMap.
func (c ConfigMapShared) Lookup(ctx context.Context, token string) (string, bool, error) {
	cm := &corev1.ConfigMap{}
	err := c.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: challengeName(token)}, cm)
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	ka := cm.Data["keyAuthorization"]
	return ka, ka != "", nil
}
