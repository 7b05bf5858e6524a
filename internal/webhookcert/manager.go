package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Manager keeps a valid serving certificate in memory and, when
// self-managing, in its Store and in the webhook configurations' caBundle.
// It implements controller-runtime's Runnable and runs on every replica.
type Manager struct {
	// Store holds the bundle.
	Store Store
	// Hosts are the names and addresses the certificate must cover; the first
	// is its common name.
	Hosts []string
	// SelfManage issues and renews the CA and certificate when needed;
	// otherwise they are only loaded.
	SelfManage bool
	// Client injects the CA bundle; nil disables injection.
	Client client.Client
	// MutatingConfigs and ValidatingConfigs name the webhook configurations
	// whose caBundle is kept in sync with the CA.
	MutatingConfigs, ValidatingConfigs []string
	// RenewBefore renews this long before expiry. Default: 30 days.
	RenewBefore time.Duration
	// Resync re-checks expiry and the store this often. Default: 10 minutes.
	Resync time.Duration

	current atomic.Pointer[tls.Certificate]
	now     func() time.Time
}

// GetCertificate serves the current certificate; plug it into
// tls.Config.GetCertificate.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := m.current.Load()
	if c == nil {
		return nil, errors.New("webhook serving certificate not loaded yet")
	}
	return c, nil
}

// TLSOpt configures a webhook server to serve from this Manager.
func (m *Manager) TLSOpt(c *tls.Config) { c.GetCertificate = m.GetCertificate }

// NeedLeaderElection implements LeaderElectionRunnable: every replica serves
// webhooks, so every replica needs its certificate.
func (m *Manager) NeedLeaderElection() bool { return false }

// Start keeps the certificate current until ctx is done.
func (m *Manager) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("webhookcert")
	resync := m.Resync
	if resync == 0 {
		resync = 10 * time.Minute
	}
	if s, ok := m.Store.(*SecretStore); ok && s.informer != nil {
		go s.Run(ctx)
	}
	t := time.NewTicker(resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.Store.Changes():
		}
		if err := m.Sync(ctx); err != nil {
			// Serving goes on with the certificate already loaded; the next
			// tick or change tries again.
			logger.Error(err, "Syncing webhook serving certificate", "store", m.Store.Describe())
		}
	}
}

// Sync loads the bundle, issues or renews it if self-managing, serves it and
// injects its CA. Call it once before the webhook server starts. When another
// replica renews at the same time, its bundle is used (up to a few attempts).
func (m *Manager) Sync(ctx context.Context) error {
	var err error
	for range 5 {
		var retry bool
		if retry, err = m.sync(ctx); !retry {
			return err
		}
	}
	return fmt.Errorf("webhook certificate in %s kept changing under us: %w", m.Store.Describe(), err)
}

// sync is one attempt; retry reports a lost race with another writer.
func (m *Manager) sync(ctx context.Context) (retry bool, _ error) {
	now := time.Now
	if m.now != nil {
		now = m.now
	}
	renew := m.RenewBefore
	if renew == 0 {
		renew = 30 * 24 * time.Hour
	}
	b, err := m.Store.Load(ctx)
	if err != nil {
		return false, fmt.Errorf("loading webhook certificate from %s: %w", m.Store.Describe(), err)
	}
	caBundle := []byte(nil)
	if problem := b.Check(m.Hosts, now(), renew); problem != nil {
		if !m.SelfManage {
			if b == nil || b.Check(m.Hosts, now(), 0) != nil {
				return false, fmt.Errorf("webhook certificate in %s cannot be used: %w", m.Store.Describe(), problem)
			}
			// Still valid, only close to expiry: whoever owns it renews it.
		} else {
			next, err := m.renew(b, now(), renew)
			if err != nil {
				return false, err
			}
			if err := m.Store.Save(ctx, b, next); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
					return true, err // another replica renewed it first: load theirs
				}
				return false, fmt.Errorf("saving webhook certificate to %s: %w", m.Store.Describe(), err)
			}
			if b != nil && len(b.CACert) > 0 && !bytes.Equal(b.CACert, next.CACert) {
				// A new CA: trust both until the next resync, so replicas that
				// still serve the old certificate are not cut off meanwhile.
				caBundle = append(append([]byte{}, next.CACert...), b.CACert...)
			}
			log.FromContext(ctx).Info("Issued webhook serving certificate", "reason", problem.Error(),
				"store", m.Store.Describe(), "notAfter", next.NotAfter())
			b = next
		}
	}
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return false, fmt.Errorf("loading webhook certificate: %w", err)
	}
	m.current.Store(&pair)
	if caBundle == nil {
		caBundle = b.CACert
	}
	if m.SelfManage && m.Client != nil {
		return false, m.inject(ctx, caBundle)
	}
	return false, nil
}

// renew reissues the serving certificate with the existing CA when the CA is
// sound and its key is known, and starts over with a new CA otherwise.
func (m *Manager) renew(b *Bundle, now time.Time, margin time.Duration) (*Bundle, error) {
	if b != nil && len(b.CAKey) > 0 {
		if ca, err := parseCert(b.CACert); err == nil && now.Add(margin).Before(ca.NotAfter) {
			next := &Bundle{CACert: b.CACert, CAKey: b.CAKey}
			if err := next.reissueServing(m.Hosts, now); err == nil {
				return next, nil
			}
		}
	}
	return Issue(m.Hosts, now)
}

// inject sets caBundle on every webhook of the named configurations.
func (m *Manager) inject(ctx context.Context, ca []byte) error {
	var errs []error
	for _, name := range m.MutatingConfigs {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		errs = append(errs, m.patchCA(ctx, name, cfg, func() bool {
			changed := false
			for i := range cfg.Webhooks {
				if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, ca) {
					cfg.Webhooks[i].ClientConfig.CABundle = ca
					changed = true
				}
			}
			return changed
		}))
	}
	for _, name := range m.ValidatingConfigs {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		errs = append(errs, m.patchCA(ctx, name, cfg, func() bool {
			changed := false
			for i := range cfg.Webhooks {
				if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, ca) {
					cfg.Webhooks[i].ClientConfig.CABundle = ca
					changed = true
				}
			}
			return changed
		}))
	}
	return errors.Join(errs...)
}

func (m *Manager) patchCA(ctx context.Context, name string, obj client.Object, mutate func() bool) error {
	if err := m.Client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).V(1).Info("Webhook configuration not found; nothing to inject", "name", name)
			return nil
		}
		return fmt.Errorf("reading webhook configuration %s: %w", name, err)
	}
	base := obj.DeepCopyObject().(client.Object)
	if !mutate() {
		return nil
	}
	if err := m.Client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("injecting CA bundle into %s: %w", name, err)
	}
	return nil
}
