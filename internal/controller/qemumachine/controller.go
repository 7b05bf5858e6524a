// Package qemumachine is the QemuMachine provider: a real QEMU virtual
// machine (TCG, or KVM when /dev/kvm exists) started and supervised through
// internal/qemu. A QEMU runs daemonized with its own pidfile and QMP socket,
// so a manager restart re-attaches to it and never reboots it. It honours
// the infrastructure-machine contract.
package qemumachine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	machinespec "github.com/converge-dev/converge/internal/machine/spec"
	"github.com/converge-dev/converge/internal/qemu"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// ControllerName is the controller's name.
const ControllerName = "qemumachine"

// ResetAnnotation on a QemuMachine asks for a reset: a new value resets the
// guest once (QMP system_reset); status.lastResetToken records it.
const ResetAnnotation = "infrastructure.converge.dev/reset"

// Defaults.
const (
	DefaultPowerDownGrace = 30 * time.Second
	observeInterval       = 10 * time.Second
)

// Reconciler reconciles QemuMachines.
type Reconciler struct {
	client.Client
	// Host runs the VMs.
	Host *qemu.Host
	// PowerDownGrace is how long an ACPI power-down may take before QEMU is
	// told to quit; DefaultPowerDownGrace when zero, none when negative.
	PowerDownGrace time.Duration
	// StopVMsOnExit quits every VM when the manager stops (`converge up`:
	// no VM outlives it). Off in a cluster, where a manager restart must
	// not touch a VM.
	StopVMsOnExit bool
	// NodeName is the node of the machine agent running this reconciler
	// (`converge agent machines`): only QemuMachines whose spec.nodeName
	// is NodeName are reconciled. Empty in a manager running VMs itself,
	// which reconciles only QemuMachines without spec.nodeName, so that no
	// VM is ever started by both.
	NodeName string
}

// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=qemumachines,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=qemumachines/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=infrastructure.converge.dev,resources=qemumachines/finalizers,verbs=update

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	if r.Host == nil {
		return errors.New("qemumachine: no VM host configured")
	}
	if r.PowerDownGrace == 0 {
		r.PowerDownGrace = DefaultPowerDownGrace
	}
	if r.StopVMsOnExit {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			<-ctx.Done()
			return r.Host.StopAll()
		})); err != nil {
			return err
		}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&infrastructurev1alpha1.QemuMachine{}, builder.WithPredicates(predicate.NewPredicateFuncs(r.ours))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4})
	if r.NodeName == "" { // a manager: it records each VM's Node (an agent has no right to Nodes)
		b = watchNodes(b)
	}
	return b.Complete(r)
}

// ours reports whether this reconciler runs obj's VM: bound to its node,
// or, in a manager, not bound to any.
func (r *Reconciler) ours(obj client.Object) bool {
	qm, ok := obj.(*infrastructurev1alpha1.QemuMachine)
	return ok && qm.Spec.NodeName == r.NodeName
}

func id(qm *infrastructurev1alpha1.QemuMachine) string { return qm.Namespace + "/" + qm.Name }

func nics(qm *infrastructurev1alpha1.QemuMachine) []qemu.NIC {
	out := make([]qemu.NIC, 0, len(qm.Spec.NetworkInterfaces))
	for _, n := range qm.Spec.NetworkInterfaces {
		out = append(out, qemu.NIC{Name: n.Name, Network: n.Network, MAC: n.MACAddress})
	}
	return out
}

// Reconcile drives one QemuMachine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	qm := &infrastructurev1alpha1.QemuMachine{}
	if err := r.Get(ctx, req.NamespacedName, qm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.ours(qm) { // bound to another node (or, for an agent, to none yet)
		return ctrl.Result{}, nil
	}
	if !qm.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(qm, infrastructurev1alpha1.QemuMachineFinalizer) {
			return ctrl.Result{}, nil
		}
		if err := r.Host.Remove(ctx, id(qm), nics(qm)); err != nil {
			return ctrl.Result{}, fmt.Errorf("removing VM %s: %w", id(qm), err)
		}
		return ctrl.Result{}, creconcile.RemoveFinalizer(ctx, r.Client, qm, infrastructurev1alpha1.QemuMachineFinalizer)
	}
	// The finalizer and the providerID in one write, before any VM.
	if !controllerutil.ContainsFinalizer(qm, infrastructurev1alpha1.QemuMachineFinalizer) || qm.Spec.ProviderID == "" {
		_, err := creconcile.EnsureFinalizerWith(ctx, r.Client, qm, infrastructurev1alpha1.QemuMachineFinalizer, func() {
			if qm.Spec.ProviderID == "" {
				qm.Spec.ProviderID = machinespec.QemuProviderID(qm)
			}
		})
		return ctrl.Result{}, err
	}
	patcher := creconcile.NewStatusPatcher(r.Client, qm)
	res, err := r.reconcileVM(ctx, qm)
	if err == nil {
		qm.Status.ObservedGeneration = qm.Generation
	}
	if r.NodeName == "" { // a manager; in agent mode the manager's Scheduler does it
		err = errors.Join(err, claimNode(ctx, r.Client, qm))
	}
	return res, errors.Join(err, client.IgnoreNotFound(patcher.Patch(ctx, qm)))
}

func setReady(qm *infrastructurev1alpha1.QemuMachine, status metav1.ConditionStatus, reason, msg string) {
	creconcile.SetCondition(&qm.Status.Conditions, qm.Generation, infrastructurev1alpha1.ReadyCondition, status, reason, msg)
}

// bootDevice is the device the next start boots from: spec.bootDevice,
// except that a bootOnce already used in this generation boots Disk.
func bootDevice(qm *infrastructurev1alpha1.QemuMachine) machinev1alpha1.BootDevice {
	d := qm.Spec.BootDevice
	if d == "" || (qm.Spec.BootOnce && qm.Status.BootOnceGeneration == qm.Generation) {
		d = machinev1alpha1.BootDisk
	}
	return d
}

func (r *Reconciler) reconcileVM(ctx context.Context, qm *infrastructurev1alpha1.QemuMachine) (ctrl.Result, error) {
	vm := id(qm)
	qm.Status.ConsoleLog = r.Host.ConsoleLog(vm)
	qm.Status.NodeName = r.NodeName
	if qm.Spec.PowerState == "" && metav1.GetControllerOf(qm) == nil && r.Host.PID(vm) == 0 {
		setReady(qm, metav1.ConditionFalse, infrastructurev1alpha1.WaitingForMachineReason,
			"no Machine controls this QemuMachine yet and spec.powerState is unset: nothing is started until a Machine takes it (with its NICs) or spec.powerState is set")
		return ctrl.Result{}, nil
	}
	if qm.Spec.PowerState == machinev1alpha1.PowerOff {
		grace := max(r.PowerDownGrace, 0)
		if err := r.Host.Stop(ctx, vm, grace); err != nil {
			return ctrl.Result{}, err
		}
		qm.Status.PID, qm.Status.PowerState = 0, machinev1alpha1.PowerOff
		if !qm.Status.Provisioned {
			qm.Status.Provisioned = true
			qm.Status.BootDevice = bootDevice(qm)
		}
		setReady(qm, metav1.ConditionTrue, infrastructurev1alpha1.PoweredOffReason, "the VM is powered off")
		return ctrl.Result{}, nil
	}
	pid := r.Host.PID(vm)
	if pid == 0 {
		boot := bootDevice(qm)
		var err error
		pid, err = r.Host.Start(ctx, qemu.Spec{
			ID: vm, Image: qm.Spec.Image, Boot: string(boot),
			CPUs: int(qm.Spec.CPUs), MemoryMiB: int(qm.Spec.MemoryMiB), NICs: nics(qm),
		})
		if err != nil {
			return r.startFailed(qm, err)
		}
		qm.Status.BootDevice = boot
		if qm.Spec.BootOnce {
			qm.Status.BootOnceGeneration = qm.Generation
		}
	}
	qm.Status.Provisioned = true
	qm.Status.PID = int32(pid) //nolint:gosec // pids fit
	if token := qm.Annotations[ResetAnnotation]; token != "" && token != qm.Status.LastResetToken {
		if err := r.Host.Reset(vm); err != nil {
			return ctrl.Result{}, fmt.Errorf("resetting VM %s: %w", vm, err)
		}
		qm.Status.LastResetToken = token
	}
	running, err := r.Host.Running(vm)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("querying VM %s: %w", vm, err)
	}
	if running {
		qm.Status.PowerState = machinev1alpha1.PowerOn
		setReady(qm, metav1.ConditionTrue, infrastructurev1alpha1.PoweredOnReason, fmt.Sprintf("QEMU %d runs", pid))
	} else {
		qm.Status.PowerState = machinev1alpha1.PowerOff
		setReady(qm, metav1.ConditionFalse, infrastructurev1alpha1.PoweringReason, fmt.Sprintf("QEMU %d runs but its guest is stopped", pid))
	}
	qm.Status.Addresses = leases(qm.Status.ConsoleLog)
	return ctrl.Result{RequeueAfter: observeInterval}, nil
}

func (r *Reconciler) startFailed(qm *infrastructurev1alpha1.QemuMachine, err error) (ctrl.Result, error) {
	qm.Status.PID, qm.Status.PowerState = 0, machinev1alpha1.PowerOff
	var ie *qemu.ImageError
	var ne *qemu.NetworkError
	var se *qemu.StartError
	switch {
	case errors.As(err, &ie):
		setReady(qm, metav1.ConditionFalse, infrastructurev1alpha1.ImageNotFoundReason, ie.Msg)
	case errors.As(err, &ne):
		setReady(qm, metav1.ConditionFalse, infrastructurev1alpha1.NetworkUnavailableReason, ne.Msg)
	case errors.As(err, &se):
		setReady(qm, metav1.ConditionFalse, infrastructurev1alpha1.StartFailedReason, se.Msg)
	default:
		return ctrl.Result{}, err
	}
	// Wait for a spec change, or for the image or network to appear.
	return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
}

// leases reads the DHCP leases the guest printed on its console (the last
// one per interface).
func leases(console string) []machinev1alpha1.MachineAddress {
	f, err := os.Open(console)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 256<<10 {
		_, _ = f.Seek(-256<<10, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	last := map[string]string{}
	var order []string
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), qemu.LeaseMarker)
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 {
			continue
		}
		if _, seen := last[fields[0]]; !seen {
			order = append(order, fields[0])
		}
		ip, _, _ := strings.Cut(fields[1], "/")
		last[fields[0]] = ip
	}
	var out []machinev1alpha1.MachineAddress
	for _, nic := range order {
		out = append(out, machinev1alpha1.MachineAddress{Type: "InternalIP", Address: last[nic]})
	}
	return out
}
