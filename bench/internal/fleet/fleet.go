// Package fleet creates the KwokMachines, Machines and MachineBMCs the
// machine benchmarks load (bench/upgrade, bench/scale), counts how many
// are up, and runs a MachineUpgrade over them.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

// The BMCs' credentials (each MachineBMC has a Secret <name>-bmc holding
// them).
const (
	User     = "admin"
	Password = "s3cret-bmc"
)

// Machines creates in ns, per name, a KwokMachine and a Machine (image
// "v1", version "1") of that name carrying labels.
func Machines(ctx context.Context, c client.Client, ns string, names []string, labels map[string]string) error {
	for _, nm := range names {
		objs := []client.Object{
			&infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm}},
			&machinev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm, Labels: labels},
				Spec: machinev1alpha1.MachineSpec{Image: "v1", Version: "1", InfrastructureRef: machinev1alpha1.InfrastructureReference{
					APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: nm}}},
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("creating %s: %w", nm, err)
			}
		}
	}
	return nil
}

// BMCs creates in ns, per name, the Secret <name>-bmc (User, Password) and
// a MachineBMC of that name for the Machine of that name, serving Redfish.
func BMCs(ctx context.Context, c client.Client, ns string, names []string) error {
	for _, nm := range names {
		objs := []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm + "-bmc"},
				Data: map[string][]byte{bmcv1alpha1.UsernameKey: []byte(User), bmcv1alpha1.PasswordKey: []byte(Password)}},
			&bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nm}, Spec: bmcv1alpha1.MachineBMCSpec{
				MachineRef: bmcv1alpha1.LocalObjectReference{Name: nm}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: nm + "-bmc"},
				Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolRedfish}}},
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("creating the BMC of %s: %w", nm, err)
			}
		}
	}
	return nil
}

// Counts says how far the fleet of a namespace is up.
type Counts struct {
	// Running Machines have phase Running and a Node; Healthy ones also
	// have NodeHealthy=True.
	Running, Healthy int
	// BMCsReady MachineBMCs have Ready=True.
	BMCsReady int
}

// Count counts the fleet in ns.
func Count(ctx context.Context, c client.Client, ns string) (Counts, error) {
	var n Counts
	ms := &machinev1alpha1.MachineList{}
	if err := c.List(ctx, ms, client.InNamespace(ns)); err != nil {
		return n, err
	}
	for i := range ms.Items {
		m := &ms.Items[i]
		if m.Status.Phase == machinev1alpha1.PhaseRunning && m.Status.NodeRef != nil {
			n.Running++
			if meta.IsStatusConditionTrue(m.Status.Conditions, machinev1alpha1.NodeHealthyCondition) {
				n.Healthy++
			}
		}
	}
	bs := &bmcv1alpha1.MachineBMCList{}
	if err := c.List(ctx, bs, client.InNamespace(ns)); err != nil {
		return n, err
	}
	for i := range bs.Items {
		if meta.IsStatusConditionTrue(bs.Items[i].Status.Conditions, bmcv1alpha1.ReadyCondition) {
			n.BMCsReady++
		}
	}
	return n, nil
}

// WaitUntil counts the fleet in ns every interval until done says true.
func WaitUntil(ctx context.Context, c client.Client, ns string, every time.Duration, done func(Counts) bool) error {
	for {
		n, err := Count(ctx, c, ns)
		if err != nil {
			return err
		}
		if done(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (fleet of %s: %+v)", ctx.Err(), ns, n)
		case <-time.After(every):
		}
	}
}

// Upgrade creates a MachineUpgrade name in ns of the Machines labelled
// selector to image and version at maxUnavailable mu, and waits until it
// Succeeded with n of n Machines done; it returns the time from its
// creation.
func Upgrade(ctx context.Context, c client.Client, ns, name string, selector map[string]string, n, mu int, image, version string) (time.Duration, error) {
	u := &upgradev1alpha1.MachineUpgrade{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: upgradev1alpha1.MachineUpgradeSpec{
			Selector: metav1.LabelSelector{MatchLabels: selector},
			Image:    image, Version: version,
			Strategy: upgradev1alpha1.UpgradeStrategy{MaxUnavailable: int32(mu)}, //nolint:gosec // small
		}}
	start := time.Now()
	if err := c.Create(ctx, u); err != nil {
		return 0, err
	}
	for {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (MachineUpgrade %s: phase %s, done %s)", ctx.Err(), name, u.Status.Phase, u.Status.Done)
		case <-time.After(200 * time.Millisecond):
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return 0, err
		}
		switch u.Status.Phase {
		case upgradev1alpha1.PhaseSucceeded:
			if u.Status.Done != fmt.Sprintf("%d/%d", n, n) {
				return 0, fmt.Errorf("succeeded with %s done", u.Status.Done)
			}
			return time.Since(start), nil
		case upgradev1alpha1.PhaseFailed, upgradev1alpha1.PhaseAborted:
			msg := ""
			if cond := meta.FindStatusCondition(u.Status.Conditions, upgradev1alpha1.ReadyCondition); cond != nil {
				msg = cond.Message
			}
			return 0, errors.New("upgrade " + string(u.Status.Phase) + ": " + msg)
		}
	}
}
