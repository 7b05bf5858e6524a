package sync

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
)

// errNoIdentity: the manager runs in lockdown, and the Sync names no
// service account while there is no default one.
var errNoIdentity = errors.New("no service account to act as (lockdown)")

// identity is the user every read and write on sy's behalf impersonates:
// its service account, else the default one, else "" for the manager's own
// identity, which lockdown refuses (errNoIdentity).
func (r *Reconciler) identity(sy *gitopsv1alpha1.Sync) (string, error) {
	sa := sy.Spec.ServiceAccountName
	if sa == "" {
		sa = r.DefaultServiceAccount
	}
	if sa == "" {
		if r.Lockdown {
			return "", errNoIdentity
		}
		return "", nil
	}
	return "system:serviceaccount:" + sy.Namespace + ":" + sa, nil
}

// clientFor returns the client every read and write on sy's behalf goes
// through (applies, dependsOn, health, drift and prune lookups): one
// impersonating its identity, or, without one and outside lockdown, one with
// the manager's own identity. Both are uncached: the manager's shared cache
// strips managedFields (setup's cacheOptions), so an object read from it
// would never look applied by this Sync (and every kind read through it
// would start a cluster-wide informer of the manager's). Only the user is
// impersonated: the API server adds a service account's groups itself, so
// the manager needs `impersonate` on serviceaccounts and nothing on groups.
func (r *Reconciler) clientFor(sy *gitopsv1alpha1.Sync) (client.Client, error) {
	user, err := r.identity(sy)
	if err != nil {
		return nil, err
	}
	if c, ok := r.clients.Load(user); ok {
		return c.(client.Client), nil
	}
	// A copy shares the manager's rate limiter: impersonated requests count
	// against the manager's budget.
	cfg := rest.CopyConfig(r.Config)
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	}
	c, err := client.New(cfg, client.Options{Scheme: r.Scheme(), Mapper: r.Mapper})
	if err != nil {
		return nil, fmt.Errorf("building the client of %s: %w", describeUser(user), err)
	}
	actual, _ := r.clients.LoadOrStore(user, c)
	return actual.(client.Client), nil
}

// forbiddenReadError is a read on the Sync's behalf that its identity may
// not do. Its message is the API server's, which names the object, the verb
// and the user, and never depends on whether the object exists.
type forbiddenReadError struct {
	what string
	err  error
}

func (e *forbiddenReadError) Error() string {
	return fmt.Sprintf("%s: the Sync's identity may not read it: %v", e.what, e.err)
}

func (e *forbiddenReadError) Unwrap() error { return e.err }

// readError wraps the error of a read on the Sync's behalf; what names the
// object and why it is read.
func readError(what string, err error) error {
	if apierrors.IsForbidden(err) {
		return &forbiddenReadError{what: what, err: err}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isForbiddenRead reports whether err holds a forbidden read.
func isForbiddenRead(err error) bool {
	var fr *forbiddenReadError
	return errors.As(err, &fr)
}

func describeUser(user string) string {
	if user == "" {
		return "the manager's identity"
	}
	return user
}
