package setup

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/converge-dev/converge/internal/apibudget"
	"github.com/converge-dev/converge/internal/eventgate"
	"github.com/converge-dev/converge/internal/leaderfence"
	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/useragent"

	"github.com/converge-dev/converge/internal/controller/basicdeployment"
	"github.com/converge-dev/converge/internal/controller/basicreplicaset"
	"github.com/converge-dev/converge/internal/controller/cainjector"
	"github.com/converge-dev/converge/internal/controller/certificate"
	"github.com/converge-dev/converge/internal/controller/certificaterequest"
	"github.com/converge-dev/converge/internal/controller/database"
	"github.com/converge-dev/converge/internal/controller/databasebackup"
	"github.com/converge-dev/converge/internal/controller/dhcpagent"
	"github.com/converge-dev/converge/internal/controller/dhcpagentdeployment"
	"github.com/converge-dev/converge/internal/controller/gitrepository"
	"github.com/converge-dev/converge/internal/controller/ippool"
	"github.com/converge-dev/converge/internal/controller/issuer"
	"github.com/converge-dev/converge/internal/controller/kwokmachine"
	"github.com/converge-dev/converge/internal/controller/lbipam"
	machinectrl "github.com/converge-dev/converge/internal/controller/machine"
	"github.com/converge-dev/converge/internal/controller/machinebmc"
	"github.com/converge-dev/converge/internal/controller/machineupgrade"
	"github.com/converge-dev/converge/internal/controller/qemumachine"
	"github.com/converge-dev/converge/internal/controller/sqlinstance"
	syncctrl "github.com/converge-dev/converge/internal/controller/sync"
)

// defaultBudgets are the per-controller defaults, taken from the anchor of
// each kind of work (docs/architecture.md, "API budgets"):
//   - gitrepository: Flux's source-controller, 50 QPS / burst 100;
//   - sync: Flux's kustomize-controller scaled to one shared bucket: Flux
//     (controller-runtime) gives every kind its own 50/100 bucket, Converge
//     one bucket per controller, and a Sync is a bulk writer whose floor is
//     the API server itself; 500/1000 measured within 1.3x of the 8-way
//     server-side-apply floor (bench/gitops), 50/100 ten times slower;
//   - basicdeployment, basicreplicaset: kube-controller-manager, 20 / 30, so
//     that bench/workloads compares like with like;
//   - database: three writes per new Database (finalizer, connection Secret,
//     status); at 20/30 client-side throttling cost 15 s for 100 Databases
//     while the 4-worker SQL floor provisions ~18 Databases/s (~55 writes/s),
//     so 50 / 100, as Flux's controllers;
//   - databasebackup: one status patch per backup, the time goes to the dump;
//     20 / 30, as the workloads;
//   - postgresinstance, mariadbinstance: a few objects and one status patch
//     per health check; 10 / 20;
//   - machine, kwokmachine: Cluster API's manager defaults, 20 / 30;
//   - qemumachine: a few writes per VM, whose boot is the slow part; 10 / 20.
var defaultBudgets = map[string]apibudget.Budget{
	gitrepository.ControllerName:       {QPS: 50, Burst: 100},
	syncctrl.ControllerName:            {QPS: 500, Burst: 1000},
	basicdeployment.ControllerName:     {QPS: 20, Burst: 30},
	basicreplicaset.ControllerName:     {QPS: 20, Burst: 30},
	database.ControllerName:            {QPS: 50, Burst: 100},
	databasebackup.ControllerName:      {QPS: 20, Burst: 30},
	sqlinstance.PostgresControllerName: {QPS: 10, Burst: 20},
	sqlinstance.MariaDBControllerName:  {QPS: 10, Burst: 20},
	machinectrl.ControllerName:         {QPS: 20, Burst: 30},
	kwokmachine.ControllerName:         {QPS: 20, Burst: 30},
	qemumachine.ControllerName:         {QPS: 10, Burst: 20},
	// machinebmc: its budget is also the BMCs' (each accepted command is
	// one Machine patch); 20 / 30, as the Machine controller it feeds.
	machinebmc.ControllerName: {QPS: 20, Burst: 30},
	// machineupgrade: per Machine about twenty writes (two checkpoints per
	// step, cordon, patch, uncordon) and an uncached read of the upgrade
	// per reconcile; 20 / 30, as the Machine controller it drives.
	machineupgrade.ControllerName: {QPS: 20, Burst: 30},
	// certificate, certificaterequest: a few writes per issuance (key
	// Secret, request, Secret, status); 50 / 100 keeps 1000 Certificates
	// within reach of the plain-loop floor (bench/certificates);
	// issuer, clusterissuer: a status patch per change; 10 / 20.
	certificate.ControllerName:         {QPS: 50, Burst: 100},
	certificaterequest.ControllerName:  {QPS: 50, Burst: 100},
	issuer.IssuerControllerName:        {QPS: 10, Burst: 20},
	issuer.ClusterIssuerControllerName: {QPS: 10, Burst: 20},
	// cainjector: an uncached GET and a patch per injected object and CA
	// change; there are few such objects. 10 / 20.
	cainjector.ControllerName: {QPS: 10, Burst: 20},
	// loadbalancer-ipam: one status patch (and one Event) per Service that
	// gets or changes an address; MetalLB's controller runs on
	// controller-runtime's 20 / 30.
	lbipam.ControllerName: {QPS: 20, Burst: 30},
	// ippool: three writes per new MachineNetworkConfig (finalizer, pool
	// status, config status) and conflict retries when configs race; as
	// database, 50 / 100. dhcp-agent: one status patch per pool change;
	// a DHCP exchange costs no API call; 20 / 30. dhcp-agent-deployment:
	// one apply per network when a pool changes; 10 / 20.
	ippool.ControllerName:              {QPS: 50, Burst: 100},
	dhcpagent.ControllerName:           {QPS: 20, Burst: 30},
	dhcpagentdeployment.ControllerName: {QPS: 10, Burst: 20},
}

// DefaultBudget is the built-in budget of a controller, or apibudget.Manager for
// "" (the manager's own clients) and unknown names.
func DefaultBudget(name string) apibudget.Budget {
	if b, ok := defaultBudgets[name]; ok {
		return b
	}
	return apibudget.Manager
}

// Budget resolves the budget of a controller ("" for the manager's own
// clients): its built-in default, overridden by the flags' default (key
// ""), overridden by the flags' entry for its name.
func (o Options) Budget(name string) apibudget.Budget {
	b := DefaultBudget(name)
	if q, ok := o.KubeAPIQPS[""]; ok {
		b.QPS = q
	}
	if n, ok := o.KubeAPIBurst[""]; ok {
		b.Burst = n
	}
	if q, ok := o.KubeAPIQPS[name]; ok && name != "" {
		b.QPS = q
	}
	if n, ok := o.KubeAPIBurst[name]; ok && name != "" {
		b.Burst = n
	}
	return b
}

// validateBudgets refuses unknown controller names and budgets that would
// block every request.
func validateBudgets(o Options) error {
	known := ControllerNames()
	for _, f := range []struct {
		flag string
		keys []string
	}{{"--kube-api-qps", slices.Collect(maps.Keys(o.KubeAPIQPS))}, {"--kube-api-burst", slices.Collect(maps.Keys(o.KubeAPIBurst))}} {
		for _, k := range f.keys {
			if k != "" && !slices.Contains(known, k) {
				return fmt.Errorf("%s: unknown controller %q (known: %s)", f.flag, k, strings.Join(known, ", "))
			}
		}
	}
	for _, name := range append([]string{""}, known...) {
		if b := o.Budget(name); !b.Unlimited() && (b.QPS == 0 || b.Burst < 1) {
			who := "the manager"
			if name != "" {
				who = "controller " + name
			}
			return fmt.Errorf("--kube-api-qps/--kube-api-burst: %s would get %s; a limited budget needs QPS > 0 and burst >= 1 (QPS < 0 turns the limit off)", who, b)
		}
	}
	return nil
}

// ControllerAPI is one controller's own connection to the API server.
type ControllerAPI struct {
	// Budget is the controller's budget.
	Budget apibudget.Budget
	// Config carries the controller's User-Agent and its RateLimiter; a
	// client built from a copy (rest.CopyConfig keeps the limiter) spends
	// the same budget.
	Config *rest.Config
	// HTTPClient is built from Config.
	HTTPClient *http.Client
	// Client reads from the manager's shared cache and writes with Config.
	Client client.Client
	// APIReader reads from the API server with Config.
	APIReader client.Reader
}

// controllerManager is the manager as one controller sees it: the shared
// cache, scheme, mapper, event recorders and runnables of the manager, but
// its own clients and budget.
type controllerManager struct {
	ctrl.Manager
	api    *ControllerAPI
	events *eventgate.Gate
}

func (m *controllerManager) GetClient() client.Client    { return m.api.Client }
func (m *controllerManager) GetAPIReader() client.Reader { return m.api.APIReader }
func (m *controllerManager) GetConfig() *rest.Config     { return m.api.Config }
func (m *controllerManager) GetHTTPClient() *http.Client { return m.api.HTTPClient }

// GetEventRecorder returns the manager's recorder behind the event gate
// (internal/eventgate): Events are handed on no faster than they are sent.
func (m *controllerManager) GetEventRecorder(name string) recorder.EventRecorder {
	return m.events.Recorder(m.Manager.GetEventRecorder(name))
}

// newControllerAPI builds a controller's clients: writes and uncached reads
// go out with its own rate limiter and User-Agent; cached reads come from
// the manager's shared cache. Writes pass the leader fence f (nil: none),
// and so do those of every client built from a copy of Config.
func newControllerAPI(mgr ctrl.Manager, name string, b apibudget.Budget, f *leaderfence.Fence) (*ControllerAPI, error) {
	cfg := apibudget.RESTConfig(mgr.GetConfig(), b, useragent.For(name))
	leaderfence.Config(cfg, f)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the HTTP client of controller %s: %w", name, err)
	}
	r, err := client.New(cfg, client.Options{HTTPClient: hc, Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("building the API reader of controller %s: %w", name, err)
	}
	opts := clientOptions()
	opts.HTTPClient, opts.Scheme, opts.Mapper = hc, mgr.GetScheme(), mgr.GetRESTMapper()
	opts.Cache.Reader = mgr.GetCache()
	if sc, ok := mgr.GetCache().(*secretcache.Reader); ok {
		// Secrets whose data the cache does not keep are read with this
		// controller's own budget.
		opts.Cache.Reader = sc.With(r)
	}
	c, err := client.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("building the client of controller %s: %w", name, err)
	}
	// Its writes name it as their field manager (managedFields), also those
	// that do not say so themselves: the kit's status and finalizer patches.
	c = client.WithFieldOwner(c, useragent.FieldOwner(name))
	return &ControllerAPI{Budget: b, Config: cfg, HTTPClient: hc, Client: c, APIReader: r}, nil
}

// clientOptions are the cached client's options of the manager and of
// every controller: typed objects from the cache, unstructured ones from the
// API server.
func clientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{Unstructured: false}}
}

// DefaultsHelp lists the built-in budgets for --help: "name=QPS/burst".
func DefaultsHelp() string {
	out := make([]string, 0, len(defaultBudgets)+1)
	for _, n := range ControllerNames() {
		b := DefaultBudget(n)
		out = append(out, fmt.Sprintf("%s=%v/%d", n, b.QPS, b.Burst))
	}
	return strings.Join(append(out, fmt.Sprintf("manager=%v/%d", apibudget.Manager.QPS, apibudget.Manager.Burst)), ", ")
}
