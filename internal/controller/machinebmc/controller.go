// Package machinebmc implements the MachineBMC controller: for each
// MachineBMC whose Machine and credentials Secret exist, it has the
// manager's BMC server (internal/bmc) serve IPMI and Redfish, publishes the
// endpoints, and marks Ready only after its own probe through them (an
// IPMI Get Device ID in an authenticated session, a Redfish GET
// /redfish/v1) answered. A change of the Secret reaches the running BMC at
// the next reconcile, without restarting anything.
package machinebmc

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/bmc/ipmi"
	"github.com/converge-dev/converge/internal/netns"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the controller's name.
const ControllerName = "machinebmc"

// FieldManager is the field manager of the controller's writes.
const FieldManager = "converge-machinebmc"

const (
	machineIndex = "spec.machineRef.name"
	secretIndex  = "spec.authSecretRef.name" //nolint:gosec // a field index name, not a credential
)

// Defaults.
const (
	// DefaultReprobeInterval is how often a Ready BMC is probed again.
	DefaultReprobeInterval = 5 * time.Minute
	// probeRetry is the wait after a failed probe.
	probeRetry = 5 * time.Second
)

// +kubebuilder:rbac:groups=bmc.converge.dev,resources=machinebmcs,verbs=get;list;watch
// +kubebuilder:rbac:groups=bmc.converge.dev,resources=machinebmcs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=machine.converge.dev,resources=machines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;create;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// Reconciler reconciles MachineBMCs.
type Reconciler struct {
	client.Client
	// Server serves the BMCs; SetupWithManager adds it to the manager.
	Server *bmc.Server
	// ReprobeInterval; DefaultReprobeInterval when zero.
	ReprobeInterval time.Duration
	// Expose is how the endpoints are published: ExposeLocal (the
	// default) or ExposeService.
	Expose Expose

	mu sync.Mutex
	// probed remembers, per MachineBMC, what its last successful probe saw
	// (endpoints and credentials) and when, so that a Machine's status
	// change does not cost a probe.
	probed map[types.NamespacedName]probeRecord
}

type probeRecord struct {
	what string
	at   time.Time
}

// SetupWithManager registers the controller and the BMC server.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	if r.Server == nil {
		r.Server = &bmc.Server{}
	}
	if r.Server.Client == nil {
		r.Server.Client = mgr.GetClient()
	}
	if r.Server.Recorder == nil {
		r.Server.Recorder = mgr.GetEventRecorder("bmc")
	}
	if r.Server.APIReader == nil {
		r.Server.APIReader = mgr.GetAPIReader()
	}
	r.Server.Log = mgr.GetLogger().WithName("bmc")
	if err := mgr.Add(r.Server); err != nil {
		return err
	}
	ctx := context.Background() //nolint:forbidigo // index registration has no request context
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &bmcv1alpha1.MachineBMC{}, machineIndex, func(o client.Object) []string {
		return []string{o.(*bmcv1alpha1.MachineBMC).Spec.MachineRef.Name}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &bmcv1alpha1.MachineBMC{}, secretIndex, func(o client.Object) []string {
		return []string{o.(*bmcv1alpha1.MachineBMC).Spec.AuthSecretRef.Name}
	}); err != nil {
		return err
	}
	byIndex := func(index string) handler.MapFunc {
		return func(ctx context.Context, o client.Object) []reconcile.Request {
			l := &bmcv1alpha1.MachineBMCList{}
			if err := r.List(ctx, l, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
				return nil
			}
			out := make([]reconcile.Request, 0, len(l.Items))
			for _, b := range l.Items {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
			}
			return out
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&bmcv1alpha1.MachineBMC{}).
		// A Machine matters when it comes or goes, not at each status change.
		Watches(&machinev1alpha1.Machine{}, handler.EnqueueRequestsFromMapFunc(byIndex(machineIndex)), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(byIndex(secretIndex))).
		// The published Service: its load-balancer address, or someone
		// else's change of it.
		Owns(&corev1.Service{}).
		Complete(r)
}

// scope is what one reconcile observed.
type scope struct {
	b          *bmcv1alpha1.MachineBMC
	machineErr error // nil: found
	secretErr  error // nil: usable
	ep         bmc.Endpoints
	caBundle   string
	publishErr error
	probeErr   error
	probed     bool
}

// Reconcile drives one MachineBMC.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	b := &bmcv1alpha1.MachineBMC{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			r.Server.Remove(req.NamespacedName)
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		r.Server.Remove(req.NamespacedName)
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	patcher := creconcile.NewStatusPatcher(r.Client, b)
	s := &scope{b: b}
	defer func() {
		computeStatus(s)
		if retErr == nil {
			b.Status.ObservedGeneration = b.Generation
		}
		retErr = errors.Join(retErr, patcher.Patch(ctx, b))
	}()

	m := &machinev1alpha1.Machine{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.MachineRef.Name}, m); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		s.machineErr = err
	}
	user, password, err := r.credentials(ctx, b)
	var invalid errSecretInvalid
	switch {
	case apierrors.IsNotFound(err), errors.As(err, &invalid):
		s.secretErr = err
	case err != nil:
		return ctrl.Result{}, err
	}
	if s.machineErr != nil || s.secretErr != nil {
		r.Server.Remove(req.NamespacedName)
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil // the watches bring the Machine or Secret back
	}

	cfg := bmc.Config{
		Machine:  types.NamespacedName{Namespace: b.Namespace, Name: m.Name},
		User:     user,
		Password: password,
		IPMI:     b.Serves(bmcv1alpha1.ProtocolIPMI),
		Redfish:  b.Serves(bmcv1alpha1.ProtocolRedfish),
	}
	cfg.IPMIPort, cfg.RedfishPort = r.preferredPorts(ctx, b)
	listening, err := r.Server.Ensure(req.NamespacedName, cfg)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("serving the BMC: %w", err)
	}
	ep, err := r.publish(ctx, b, listening)
	var conflict errServiceConflict
	var pending errServicePending
	switch {
	case errors.As(err, &conflict), errors.As(err, &pending):
		s.publishErr = err
		return ctrl.Result{RequeueAfter: probeRetry}, nil // a Service event also brings us back
	case err != nil:
		return ctrl.Result{}, err
	}
	s.ep = ep
	if ep.Redfish != "" {
		// The certificate names the published host too (a Service's
		// address), so clients verify it against the host they dial.
		if u, err := url.Parse(ep.Redfish); err == nil {
			if err := r.Server.CoverNames(req.NamespacedName, u.Hostname()); err != nil {
				return ctrl.Result{}, err
			}
		}
		s.caBundle = string(r.Server.CABundle())
	}

	what := ep.IPMI + "|" + ep.Redfish + "|" + fingerprint(user, password)
	reprobe := r.ReprobeInterval
	if reprobe == 0 {
		reprobe = DefaultReprobeInterval
	}
	if last, ok := r.lastProbe(req.NamespacedName); ok && last.what == what && time.Since(last.at) < reprobe && creconcile.IsTrue(b.Status.Conditions, bmcv1alpha1.ReadyCondition) {
		s.probed = true
		return ctrl.Result{RequeueAfter: reprobe - time.Since(last.at)}, nil
	}
	s.probed = true
	s.probeErr = r.probe(ctx, ep, user, password)
	if s.probeErr != nil {
		return ctrl.Result{RequeueAfter: probeRetry}, nil
	}
	r.remember(req.NamespacedName, probeRecord{what: what, at: time.Now()})
	return ctrl.Result{RequeueAfter: reprobe}, nil
}

// errSecretInvalid is a Secret that exists but cannot be used.
type errSecretInvalid struct{ why string }

func (e errSecretInvalid) Error() string { return e.why }

func (r *Reconciler) credentials(ctx context.Context, b *bmcv1alpha1.MachineBMC) (string, string, error) {
	sec := &corev1.Secret{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.AuthSecretRef.Name}, sec); err != nil {
		return "", "", err
	}
	user, password := string(sec.Data[bmcv1alpha1.UsernameKey]), string(sec.Data[bmcv1alpha1.PasswordKey])
	if why := ValidateCredentials(user, password); why != "" {
		return "", "", errSecretInvalid{why: fmt.Sprintf("Secret %s: %s", sec.Name, why)}
	}
	return user, password, nil
}

// MinPasswordBytes is the shortest BMC password served: the BMC is reached
// over the network (IPMI's RAKP exchange lets anyone who can start a
// session test guesses offline), so a password of one character would open
// the Machine's power to the network.
const MinPasswordBytes = 8

// ValidateCredentials says what is wrong with a user name and password,
// or "" when IPMI and Redfish can use them.
func ValidateCredentials(user, password string) string {
	switch {
	case user == "":
		return "username is missing or empty (anonymous BMC users are not served)"
	case password == "":
		return "password is missing or empty"
	case len(user) > 16:
		return "username is longer than 16 bytes (IPMI's limit)"
	case len(password) < MinPasswordBytes:
		return fmt.Sprintf("password is shorter than %d bytes (choose a longer one: the BMC is reachable from the network)", MinPasswordBytes)
	case len(password) > 20:
		return "password is longer than 20 bytes (IPMI v2.0's limit)"
	}
	return ""
}

// probe checks the published endpoints as a client would: an
// authenticated IPMI session with a Get Device ID, and an HTTPS GET of the
// Redfish service root.
func (r *Reconciler) probe(ctx context.Context, ep bmc.Endpoints, user, password string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if ep.IPMI != "" {
		var c *ipmi.Client
		err := netns.Do(r.Server.NetNS, func() (err error) {
			c, err = ipmi.Dial(ctx, ep.IPMI, user, password, ipmi.CipherSuite17)
			return err
		})
		if err != nil {
			return fmt.Errorf("IPMI at %s: %w", ep.IPMI, err)
		}
		_, err = c.DeviceID(ctx)
		err = errors.Join(err, c.Close(ctx))
		if err != nil {
			return fmt.Errorf("IPMI at %s: %w", ep.IPMI, err)
		}
	}
	if ep.Redfish != "" {
		// Verified as a client does: against the CA, for the published
		// host (which the certificate names: CoverNames).
		tc := &tls.Config{RootCAs: r.Server.RootCAs(), MinVersion: tls.VersionTLS12}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DialContext: r.Server.Dial}}
		defer hc.CloseIdleConnections()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.Redfish+"/redfish/v1/", nil)
		if err != nil {
			return err
		}
		rsp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("redfish at %s: %w", ep.Redfish, err)
		}
		_ = rsp.Body.Close()
		if rsp.StatusCode != http.StatusOK {
			return fmt.Errorf("redfish at %s: GET /redfish/v1/ answered %s", ep.Redfish, rsp.Status)
		}
	}
	return nil
}

func portOf(endpoint string) int {
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		endpoint = u.Host
	}
	_, p, err := net.SplitHostPort(endpoint)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

func fingerprint(user, password string) string {
	s := sha256.Sum256([]byte(user + "\x00" + password))
	return hex.EncodeToString(s[:8])
}

func (r *Reconciler) lastProbe(k types.NamespacedName) (probeRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.probed[k]
	return p, ok
}

func (r *Reconciler) remember(k types.NamespacedName, p probeRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probed == nil {
		r.probed = map[types.NamespacedName]probeRecord{}
	}
	r.probed[k] = p
}

func (r *Reconciler) forget(k types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.probed, k)
}
