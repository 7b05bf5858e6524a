package testenv

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/setup"
)

// tenantWriter is Environment.Tenant: it creates, updates, patches and
// deletes every namespaced object as the ServiceAccount sa of that object's
// namespace (impersonated, user only, so the API server adds the
// ServiceAccount's groups, as it does for a real tenant). Reads, status
// writes and DeleteAllOf go through the embedded admin client. A
// cluster-scoped object is refused: no tenant may write one, so a suite that
// needs one says so by using Environment.Client.
type tenantWriter struct {
	client.Client
	cfg     *rest.Config
	sa      string
	mu      sync.Mutex
	clients map[string]client.Client
}

func newTenantWriter(admin client.Client, cfg *rest.Config, sa string) *tenantWriter {
	return &tenantWriter{Client: admin, cfg: cfg, sa: sa, clients: map[string]client.Client{}}
}

func (w *tenantWriter) as(obj client.Object) (client.Client, error) {
	ns := obj.GetNamespace()
	if ns == "" {
		return nil, fmt.Errorf("testenv: a tenant cannot write the cluster-scoped %T %q; use Environment.Client", obj, obj.GetName())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.clients[ns]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(w.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, w.sa)}
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme(), Mapper: w.RESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("testenv: a client acting as %s/%s: %w", ns, w.sa, err)
	}
	w.clients[ns] = c
	return c, nil
}

func (w *tenantWriter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c, err := w.as(obj)
	if err != nil {
		return err
	}
	return c.Create(ctx, obj, opts...)
}

func (w *tenantWriter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c, err := w.as(obj)
	if err != nil {
		return err
	}
	return c.Update(ctx, obj, opts...)
}

func (w *tenantWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c, err := w.as(obj)
	if err != nil {
		return err
	}
	return c.Patch(ctx, obj, patch, opts...)
}

func (w *tenantWriter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c, err := w.as(obj)
	if err != nil {
		return err
	}
	return c.Delete(ctx, obj, opts...)
}
