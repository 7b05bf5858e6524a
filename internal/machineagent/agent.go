// Package machineagent is the per-node machine agent (`converge agent
// machines`, a DaemonSet in a cluster): it runs the QemuMachine reconciler
// of internal/controller/qemumachine for the QemuMachines bound to its
// node (spec.nodeName), and renews a heartbeat Lease the manager's
// scheduler reads. QEMU thus runs outside the manager Pod, and a manager
// restart or upgrade cannot touch a VM. The agent never stops a VM when it
// exits: a restarted agent re-attaches to each QEMU through its pidfile
// and QMP socket in the state directory.
package machineagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	"github.com/converge-dev/converge/internal/controller/qemumachine"
	machineoptions "github.com/converge-dev/converge/internal/machine/options"
	"github.com/converge-dev/converge/internal/qemu"
	"github.com/converge-dev/converge/internal/useragent"
)

// The agent's rights (config/rbac/machineagent, the chart's machine agent
// ClusterRole): its QemuMachines and Events. Its heartbeat Lease is
// granted by a Role in the Lease namespace (the chart's machine agent Role).
//
// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=qemumachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=qemumachines/status,verbs=get;patch
// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=qemumachines/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Defaults of Config.
const (
	DefaultLeaseDuration = 20 * time.Second
	DefaultRenewInterval = 5 * time.Second
)

// Config configures one agent.
type Config struct {
	// RESTConfig and Scheme reach the API server.
	RESTConfig *rest.Config
	Scheme     *runtime.Scheme
	// NodeName is this node: the agent runs the QemuMachines whose
	// spec.nodeName is NodeName.
	NodeName string
	// Machines configures the VM host (StateDir, ImageDir, Netns,
	// QemuBinary, QemuAccel, PowerDownGrace); the defaults are the
	// manager's (machineoptions.DefaultMachineStateDir, ...). StopVMsOnExit is
	// refused: an agent never stops a VM when it exits.
	Machines machineoptions.Machines
	// LeaseNamespace holds the heartbeat Lease.
	LeaseNamespace string
	// LeaseDuration and RenewInterval time the heartbeat; the Default*
	// constants when zero.
	LeaseDuration, RenewInterval time.Duration
	// HealthProbeBindAddress serves /healthz and /readyz; "" or "0"
	// disables.
	HealthProbeBindAddress string
	// Log is the agent's logger.
	Log logr.Logger
}

// Run runs the agent until ctx ends. VMs are left running.
func Run(ctx context.Context, c Config) error {
	if c.NodeName == "" {
		return errors.New("machine agent: no node name")
	}
	if c.Machines.StopVMsOnExit {
		return errors.New("machine agent: StopVMsOnExit is refused: an agent never stops VMs when it exits")
	}
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = machineoptions.DefaultAgentLeaseNamespace
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.RenewInterval >= c.LeaseDuration {
		return fmt.Errorf("machine agent: the renew interval (%s) must be shorter than the lease duration (%s)", c.RenewInterval, c.LeaseDuration)
	}
	m := c.Machines
	if m.StateDir == "" {
		m.StateDir = machineoptions.DefaultMachineStateDir
	}
	if m.ImageDir == "" {
		m.ImageDir = machineoptions.DefaultMachineImageDir
	}
	switch m.QemuAccel {
	case qemu.AccelAuto, qemu.AccelKVM, qemu.AccelTCG:
	default:
		return fmt.Errorf("--machine-qemu-accel=%q: want kvm, tcg or empty (automatic)", m.QemuAccel)
	}
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.UserAgent = useragent.For("machineagent")
	probe := c.HealthProbeBindAddress
	if probe == "" {
		probe = "0"
	}
	// One agent per node: no leader election. The cache holds only this
	// node's QemuMachines (spec.nodeName is a selectable field of the CRD).
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 c.Scheme,
		Logger:                 c.Log,
		HealthProbeBindAddress: probe,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&infrastructurev1alpha1.QemuMachine{}: {Field: fields.OneTermEqualSelector("spec.nodeName", c.NodeName)},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		},
	})
	if err != nil {
		return fmt.Errorf("creating the machine agent's manager: %w", err)
	}
	if probe != "0" {
		if err := mgr.AddHealthzCheck("ping", func(_ *http.Request) error { return nil }); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("cache", func(r *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(r.Context()) {
				return errors.New("cache not synced")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	// The heartbeat writes through a client of its own, uncached: the
	// agent reads no Lease but its own.
	leases, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		return fmt.Errorf("creating the heartbeat client: %w", err)
	}
	if err := mgr.Add(&qemumachine.Heartbeat{Client: leases, Namespace: c.LeaseNamespace, NodeName: c.NodeName,
		Duration: c.LeaseDuration, Interval: c.RenewInterval}); err != nil {
		return err
	}
	r := &qemumachine.Reconciler{
		Host:           &qemu.Host{StateDir: m.StateDir, ImageDir: m.ImageDir, Netns: m.Netns, Binary: m.QemuBinary, Accel: m.QemuAccel},
		PowerDownGrace: m.PowerDownGrace,
		NodeName:       c.NodeName,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the QemuMachine reconciler: %w", err)
	}
	c.Log.Info("Starting the machine agent", "stateDir", m.StateDir, "imageDir", m.ImageDir)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the machine agent: %w", err)
	}
	return nil
}
