package up

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/ui"
)

// UINamespace is the namespace whose graph the page `converge up` serves
// shows; `converge ui` serves any other namespace or object.
const UINamespace = "default"

// startUI serves the live graph of internal/ui (what `converge ui` serves)
// in this process on address, with cfg's identity: the admin kubeconfig `up`
// writes, the identity its user already holds. The page's URL carries a
// random token made for this run.
func (p *Platform) startUI(ctx context.Context, cfg *rest.Config, address string) error {
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return fmt.Errorf("ui: building a client: %w", err)
	}
	s, err := ui.New(ui.Options{Config: cfg, Client: c, Namespace: UINamespace})
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	ln, url, err := s.Listen(address)
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Serve(uctx, ln); err != nil {
			ctrl.Log.WithName("ui").Error(err, "serving the live graph")
		}
	}()
	p.UIURL = url
	p.stopUI = func() {
		cancel()
		<-done
	}
	return nil
}
