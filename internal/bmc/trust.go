package bmc

import (
	"context"
	"crypto/x509"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/pki"
)

// CATrust is the pool clients of the BMCs verify the Redfish certificates
// with (the MachineUpgrade controller's): the CA certificate of the CA
// Secret (never its key), kept in memory so that a new connection costs no
// API request.
//
// The pool is made again from the Secret only when needed:
//   - when the Secret's resourceVersion in Cache (the manager's shared
//     cache, which keeps the data of the labelled CA Secret) is not the one
//     the pool was made from, so that a replaced CA stops being trusted as
//     soon as the cache sees it;
//   - on Reload, after a certificate did not verify, from Live (the cache
//     may not have seen a new CA yet).
//
// When Cache cannot read the Secret (a --watch-namespace that leaves the
// manager's namespace out), every Pool reads it from Live, as before the
// pool was kept.
type CATrust struct {
	// Key locates the CA Secret.
	Key types.NamespacedName
	// Cache reads from the manager's cache.
	Cache client.Reader
	// Live reads from the API server.
	Live client.Reader

	mu   sync.Mutex
	pool *x509.CertPool
	// cacheRV is the resourceVersion of the Secret in Cache when the pool
	// was last made, or checked, against it.
	cacheRV string
}

// Pool returns the pool of the CA Secret's certificate.
func (t *CATrust) Pool(ctx context.Context) (*x509.CertPool, error) {
	sec := &corev1.Secret{}
	if err := t.Cache.Get(ctx, t.Key, sec); err != nil {
		return t.read(ctx)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pool != nil && sec.ResourceVersion == t.cacheRV {
		return t.pool, nil
	}
	pool, err := t.parse(sec)
	if err != nil {
		return nil, err
	}
	t.pool, t.cacheRV = pool, sec.ResourceVersion
	return pool, nil
}

// Reload reads the CA Secret from Live and keeps the pool made from it
// until the cache's copy of the Secret changes.
func (t *CATrust) Reload(ctx context.Context) (*x509.CertPool, error) {
	pool, err := t.read(ctx)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pool = pool
	return pool, nil
}

func (t *CATrust) read(ctx context.Context) (*x509.CertPool, error) {
	sec := &corev1.Secret{}
	if err := t.Live.Get(ctx, t.Key, sec); err != nil {
		return nil, fmt.Errorf("reading the BMC CA Secret %s: %w", t.Key, err)
	}
	return t.parse(sec)
}

func (t *CATrust) parse(sec *corev1.Secret) (*x509.CertPool, error) {
	certs, err := pki.ParseCerts(sec.Data[corev1.TLSCertKey])
	if err != nil {
		return nil, fmt.Errorf("the BMC CA Secret %s: %w", t.Key, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		if c.IsCA {
			pool.AddCert(c)
		}
	}
	return pool, nil
}
