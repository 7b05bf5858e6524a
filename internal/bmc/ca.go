package bmc

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/webhookcert"
)

// DefaultCASecretName is the name of the Secret holding the BMC CA, in the
// manager's namespace.
const DefaultCASecretName = "converge-bmc-ca" //nolint:gosec // a Secret's name, not a credential

// CABundleKey is the key of the CA Secret holding the bundle clients trust
// (the CA certificate alone).
const CABundleKey = "ca.crt"

// renewBefore is how long before its end a Redfish serving certificate is
// issued again (CoverNames).
const renewBefore = 30 * 24 * time.Hour

// caSubject is the BMC CA's subject.
var caSubject = pkix.Name{CommonName: "converge-bmc-ca", Organization: []string{"Converge"}}

// The BMC CA is the certificate authority of the Redfish serving
// certificates: one for every BMC and every leader, a webhookcert.Bundle
// holding the CA alone, kept in a Secret of the manager's namespace
// (tenants cannot write it) and published in each MachineBMC's
// status.redfishCABundle. The serving certificates are never stored: each
// leader issues its own (webhookcert.Bundle.IssueServing).

// NewCA makes a BMC CA in memory (ECDSA P-256, ten years long), not kept
// anywhere.
func NewCA() (*webhookcert.Bundle, error) {
	return webhookcert.NewCA(caSubject, time.Now())
}

// CAStore is the create-only store of the BMC CA Secret key (type
// kubernetes.io/tls: tls.crt, tls.key, and ca.crt, the bundle). The Secret
// it creates is labelled secretcache.Label, so that the manager's shared
// cache keeps its data and the MachineUpgrade controller reads it from
// memory (CATrust).
func CAStore(r client.Reader, w client.Writer, key types.NamespacedName) *webhookcert.CASecretStore {
	return &webhookcert.CASecretStore{Reader: r, Writer: w, Key: key, Labels: map[string]string{
		"app.kubernetes.io/name": "converge", "app.kubernetes.io/component": "bmc-ca", secretcache.Label: "true"}}
}

// LoadOrCreateCA returns the CA kept in the Secret key, creating the Secret
// when it does not exist (CAStore, webhookcert.LoadOrCreateCA): of two
// managers starting at once, the second's create fails with AlreadyExists
// and it reads the first's, so both end with the same CA. A Secret that
// holds no valid CA is an error (it is never overwritten: delete it to have
// a new CA made). created says whether this call made it.
func LoadOrCreateCA(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) (ca *webhookcert.Bundle, created bool, err error) {
	ca, created, err = webhookcert.LoadOrCreateCA(ctx, CAStore(r, w, key), caSubject, time.Now())
	if err != nil {
		return nil, false, fmt.Errorf("the BMC CA: %w", err)
	}
	return ca, created, nil
}
