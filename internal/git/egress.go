package git

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"golang.org/x/net/proxy"

	"github.com/converge-dev/converge/internal/egress"
)

// The http and https transports are shared by every caller in the process,
// so they dial through the Policy the call's context carries (none: no
// restriction). go-git's ssh transport dials with a context of its own, so
// the Policy reaches it as a "proxy" (a dialer registered under
// proxyScheme, found by its id in the proxy URL). git:// dials without
// either; its host is resolved and checked first, then dialled by address.
func init() {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return egress.FromContext(ctx).DialContext(ctx, network, addr)
	}
	c := githttp.NewClient(&http.Client{Transport: t})
	client.InstallProtocol("https", c)
	client.InstallProtocol("http", c)
	proxy.RegisterDialerType(proxyScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		v, ok := policies.Load(u.Host)
		if !ok {
			return nil, fmt.Errorf("%w: unknown egress policy %q", egress.ErrDenied, u.Host)
		}
		return policyDialer{v.(*egress.Policy)}, nil
	})
}

const proxyScheme = "converge-egress"

// policies maps a proxy URL's host, the Policy's address, to the Policy
// (a process holds a few: one per manager).
var policies sync.Map

func proxyURL(p *egress.Policy) string {
	id := fmt.Sprintf("p%p", p)
	policies.LoadOrStore(id, p)
	return proxyScheme + "://" + id
}

type policyDialer struct{ p *egress.Policy }

func (d policyDialer) Dial(network, addr string) (net.Conn, error) {
	return d.p.DialContext(context.Background(), network, addr) //nolint:forbidigo // proxy.Dialer has no context; go-git calls DialContext
}

func (d policyDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.p.DialContext(ctx, network, addr)
}

// guard checks rawURL against the client's Policy before any read or dial:
// a file:// path must lie under a file root, a host must not resolve to a
// denied address. It returns the context and URL to use (git:// rewritten
// to the checked address) and the proxy options (ssh).
func (c Client) guard(ctx context.Context, rawURL string) (context.Context, string, transport.ProxyOptions, error) {
	if c.Policy == nil {
		return ctx, rawURL, transport.ProxyOptions{}, nil
	}
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return ctx, rawURL, transport.ProxyOptions{}, fmt.Errorf("parsing the URL: %w", err)
	}
	ctx = egress.WithPolicy(ctx, c.Policy)
	switch ep.Protocol {
	case "file":
		return ctx, rawURL, transport.ProxyOptions{}, c.Policy.CheckFile(ep.Path)
	case "git":
		a, err := c.Policy.ResolveHost(ctx, ep.Host)
		if err != nil {
			return ctx, rawURL, transport.ProxyOptions{}, err
		}
		u, err := url.Parse(rawURL)
		if err != nil {
			return ctx, rawURL, transport.ProxyOptions{}, fmt.Errorf("parsing the URL: %w", err)
		}
		switch port := u.Port(); {
		case port != "":
			u.Host = net.JoinHostPort(a.String(), port)
		case a.Is6():
			u.Host = "[" + a.String() + "]"
		default:
			u.Host = a.String()
		}
		return ctx, u.String(), transport.ProxyOptions{}, nil
	case "ssh":
		return ctx, rawURL, transport.ProxyOptions{URL: proxyURL(c.Policy)}, c.Policy.CheckHost(ctx, ep.Host)
	default: // http, https: checked again at connect time by the transport
		return ctx, rawURL, transport.ProxyOptions{}, c.Policy.CheckHost(ctx, ep.Host)
	}
}
