// Package receiver is the push endpoint of the gitops controllers: GitHub,
// GitLab and generic webhooks POST to /hook/gitrepository/<namespace>/<name>
// and, once the request is verified against the token in the Secret named by
// the GitRepository's gitops.converge.dev/webhook-secret annotation, the
// GitRepository is asked to fetch at once (converge.dev/reconcile-requested-at).
// A GitRepository without the annotation is not reachable this way.
//
// The receiver has a listener of its own (Server, --receiver-bind-address),
// apart from the admission webhooks, with timeouts, a body limit and rate
// limits per source and overall. A request is verified before anything is
// read from the API server: the GitRepository and its Secret are looked up in
// the manager's cache (informers it starts with the manager, never because
// of a request), so a request without the token costs a map lookup and an
// HMAC, and the only API call the receiver ever makes is the patch of a
// verified request.
package receiver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// PathPrefix is where the receiver serves.
const PathPrefix = "/hook/"

// SecretAnnotation on a GitRepository names the Secret (same namespace)
// whose `token` key verifies push webhooks for it.
const SecretAnnotation = "gitops.converge.dev/webhook-secret"

// FieldManager is the field manager of the receiver's writes.
const FieldManager = "converge-receiver"

// +kubebuilder:rbac:groups=gitops.converge.dev,resources=gitrepositories,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
//
// Secrets are cached cluster-wide, as the database controllers already
// cache them (docs/security.md, "The push receiver").

// maxBody bounds a webhook payload.
const maxBody = 1 << 20

// Handler serves push webhooks.
type Handler struct {
	// Client patches GitRepositories.
	Client client.Client
	// Reader looks up GitRepositories and Secrets before a request is
	// verified. It must be the manager's cache, never a reader that reaches
	// the API server: unauthenticated requests must not cause API reads.
	Reader client.Reader
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
}

// ServeHTTP verifies and acts on one webhook.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, PathPrefix), "/")
	if len(parts) != 3 || parts[0] != "gitrepository" || parts[1] == "" || parts[2] == "" {
		http.Error(w, "want "+PathPrefix+"gitrepository/<namespace>/<name>", http.StatusNotFound)
		return
	}
	key := types.NamespacedName{Namespace: parts[1], Name: parts[2]}
	ctx := r.Context()
	log := ctrl.LoggerFrom(ctx).WithValues("GitRepository", key)
	// Without any signature or token there is nothing to look up.
	if !hasCredentials(r.Header) {
		http.Error(w, "no signature or token", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "payload unreadable", http.StatusBadRequest)
		return
	}
	token, err := h.token(ctx, key)
	if err != nil {
		// The same answer for "no such object" and "no secret", so the
		// endpoint does not reveal which GitRepositories exist.
		log.V(1).Info("Refusing webhook", "reason", err.Error())
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	provider, ok := Verify(r.Header, body, token)
	if !ok {
		log.Info("Refusing webhook with a bad signature or token")
		http.Error(w, "signature or token mismatch", http.StatusUnauthorized)
		return
	}
	if ev := r.Header.Get("X-GitHub-Event"); ev == "ping" {
		w.WriteHeader(http.StatusOK)
		return
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	repo := &gitopsv1alpha1.GitRepository{}
	repo.Namespace, repo.Name = key.Namespace, key.Name
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, gitopsv1alpha1.ReconcileRequestAnnotation, now().UTC().Format(time.RFC3339Nano))
	if err := h.Client.Patch(ctx, repo, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		log.Error(err, "Requesting a fetch")
		http.Error(w, "could not request a fetch", http.StatusInternalServerError)
		return
	}
	log.Info("Fetch requested by webhook", "provider", provider)
	w.WriteHeader(http.StatusAccepted)
}

// token looks the token up in the cache (Reader).
func (h *Handler) token(ctx context.Context, key types.NamespacedName) ([]byte, error) {
	repo := &gitopsv1alpha1.GitRepository{}
	if err := h.Reader.Get(ctx, key, repo); err != nil {
		return nil, err
	}
	name := repo.Annotations[SecretAnnotation]
	if name == "" {
		return nil, errors.New("no " + SecretAnnotation + " annotation")
	}
	sec := &corev1.Secret{}
	if err := h.Reader.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %s not found", name)
		}
		return nil, err
	}
	tok := sec.Data["token"]
	if len(tok) == 0 {
		return nil, fmt.Errorf("secret %s has no token", name)
	}
	return tok, nil
}

// hasCredentials reports whether the request carries any header Verify
// checks.
func hasCredentials(hdr http.Header) bool {
	for _, k := range []string{"X-Hub-Signature-256", "X-Gitlab-Token", "X-Signature-256"} {
		if hdr.Get(k) != "" {
			return true
		}
	}
	return strings.HasPrefix(hdr.Get("Authorization"), "Bearer ")
}

// Verify checks a webhook against token and names the provider:
// GitHub (X-Hub-Signature-256 HMAC-SHA256 of the body), GitLab
// (X-Gitlab-Token equal to the token), or generic (X-Signature-256 HMAC as
// GitHub's, or Authorization: Bearer <token>).
func Verify(hdr http.Header, body, token []byte) (string, bool) {
	if sig := hdr.Get("X-Hub-Signature-256"); sig != "" {
		return "github", validHMAC(sig, body, token)
	}
	if t := hdr.Get("X-Gitlab-Token"); t != "" {
		return "gitlab", subtle.ConstantTimeCompare([]byte(t), token) == 1
	}
	if sig := hdr.Get("X-Signature-256"); sig != "" {
		return "generic", validHMAC(sig, body, token)
	}
	if a, ok := strings.CutPrefix(hdr.Get("Authorization"), "Bearer "); ok {
		return "generic", subtle.ConstantTimeCompare([]byte(a), token) == 1
	}
	return "", false
}

func validHMAC(sig string, body, token []byte) bool {
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, token)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}

// Sign returns the X-Hub-Signature-256 / X-Signature-256 value for body.
func Sign(body, token []byte) string {
	m := hmac.New(sha256.New, token)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
