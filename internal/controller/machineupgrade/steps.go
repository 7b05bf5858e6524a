package machineupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/drain"
	contract "github.com/converge-dev/converge/pkg/contract/infrastructuremachine"
)

func cordon(ctx context.Context, c client.Client, n *corev1.Node) (bool, error) {
	return drain.Cordon(ctx, c, n, client.FieldOwner(FieldManager))
}

func uncordon(ctx context.Context, c client.Client, n *corev1.Node) (bool, error) {
	return drain.Uncordon(ctx, c, n, client.FieldOwner(FieldManager))
}

// runStep runs mp's current step once. done: the step finished; msg: what
// it waits for when not done; err: the attempt failed.
func (r *Reconciler) runStep(ctx context.Context, s *scope, mp *upgradev1alpha1.MachineProgress, post []compiled) (bool, string, error) {
	u := s.u
	m := &machinev1alpha1.Machine{}
	key := types.NamespacedName{Namespace: u.Namespace, Name: mp.Name}
	// For the power cycle the Machine is read uncached: whether a reset
	// was sent must not be judged on a stale copy. WaitForBoot reads the
	// cache and confirms uncached whatever it would act on (below).
	var reader client.Reader = r.Client
	if mp.Step == upgradev1alpha1.StepPowerCycle {
		reader = r.APIReader
	}
	if err := reader.Get(ctx, key, m); err != nil {
		if apierrors.IsNotFound(err) {
			return false, "", fmt.Errorf("machine %s is gone", mp.Name)
		}
		return false, "", fmt.Errorf("reading Machine %s: %w", mp.Name, err)
	}
	switch mp.Step {
	case upgradev1alpha1.StepCordon:
		node, why, err := r.machineNode(ctx, m)
		if err != nil || node == nil {
			return err == nil && why == "", why, err
		}
		if mp.CordonedBy == "" {
			// Before the first cordon write, record (read uncached) whether
			// the Node is already cordoned: an abort, skip or deletion takes
			// back only the upgrade's own cordon. A resumed step trusts the
			// record: its cordon may have been written since.
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
				return false, "", fmt.Errorf("reading Node %s: %w", node.Name, err)
			}
			mp.CordonedBy = upgradev1alpha1.CordonedByUpgrade
			if node.Spec.Unschedulable {
				mp.CordonedBy = upgradev1alpha1.CordonedByOther
			}
			if err := r.checkpoint(ctx, s); err != nil {
				return false, "", err
			}
		}
		_, err = cordon(ctx, r.Client, node)
		return err == nil, "", err

	case upgradev1alpha1.StepDrain:
		node, why, err := r.machineNode(ctx, m)
		if err != nil || node == nil {
			return err == nil && why == "", why, err
		}
		res, err := drain.Evict(ctx, r.Client, r.APIReader, node.Name)
		for _, p := range res.Evicted {
			// The upgrade's Events are read in the Machines' namespace
			// (by its tenant): another namespace's Pod is not named there.
			var related runtime.Object
			if p.Namespace == m.Namespace {
				related = p
			}
			r.event(s, related, corev1.EventTypeNormal, EventEvicted, "Drain", "Machine %s: evicted Pod %s from Node %s", m.Name, drain.Name(m.Namespace, p), node.Name)
		}
		if err != nil {
			return false, "", err
		}
		if res.Done() {
			return true, "", nil
		}
		msg := fmt.Sprintf("draining Node %s: %d Pod(s) left: %s", node.Name, len(res.Waiting), drain.JoinNames(res.Waiting, 5))
		if len(res.Refused) > 0 {
			msg += "; a PodDisruptionBudget refuses the eviction of " + drain.JoinNames(res.Refused, 5)
			s.drainBlocked = append(s.drainBlocked, "Machine "+m.Name+": "+msg)
		}
		return false, msg, nil

	case upgradev1alpha1.StepSetImage:
		return true, "", r.patchMachineSpec(ctx, m, u.Spec.Image, u.Spec.Version, machinev1alpha1.BootNetwork, true)

	case upgradev1alpha1.StepPowerCycle:
		if !s.startedHere[mp.Name] {
			// Resumed: a reset may have been sent before the manager
			// stopped. The BMC writes powerState Off before it answers, and
			// a machine that came back since runs the new image.
			if sent, why := r.resetSent(ctx, u, m); sent {
				r.event(s, m, corev1.EventTypeNormal, EventReset, "PowerCycle", "Machine %s: not reset again: %s", m.Name, why)
				return true, "", nil
			}
			// No sign of it: say so in a checkpoint first, so that of two
			// reconciles resuming from the same status only one sends it.
			mp.Message = "resumed with no sign of a reset sent: sending it"
			r.markConsole(ctx, u, mp, m)
			if err := r.checkpoint(ctx, s); err != nil {
				return false, "", err
			}
		} else if r.markConsole(ctx, u, mp, m) {
			// Where the console stands, before the reset: a console check
			// reads only what the machine prints after it.
			if err := r.checkpoint(ctx, s); err != nil {
				return false, "", err
			}
		}
		err := r.redfishReset(ctx, s, m, "PowerCycle")
		return err == nil, "", err

	case upgradev1alpha1.StepWaitForBoot:
		// A power cycle whose BMC stopped between its off and its on (the
		// manager serving it was stopped) leaves the machine off: press the
		// power button, once it has been off for BootKick.
		back, why, err := r.cameBack(ctx, u, m)
		if err != nil || back || r.kickDue(s, mp, m) {
			// The cached copy may be behind (the image write not seen yet,
			// the machine on again): what the step acts on is confirmed on
			// the Machine as stored. Waiting on a stale copy costs nothing:
			// the Machine watch brings the next one. (An uncached read of
			// every waiting Machine on every reconcile spent the budget.)
			if err := r.APIReader.Get(ctx, key, m); err != nil {
				return false, "", fmt.Errorf("reading Machine %s: %w", mp.Name, err)
			}
			back, why, err = r.cameBack(ctx, u, m)
		}
		if err != nil || back {
			return back, "", err
		}
		s.waiting = append(s.waiting, "Machine "+m.Name+": "+why)
		if r.kickDue(s, mp, m) {
			if err := r.redfishReset(ctx, s, m, "On"); err != nil {
				return false, "", err
			}
		}
		return false, why, nil

	case upgradev1alpha1.StepUncordon:
		node, why, err := r.machineNode(ctx, m)
		if err != nil || node == nil {
			return err == nil && why == "", why, err
		}
		_, err = uncordon(ctx, r.Client, node)
		return err == nil, "", err

	case upgradev1alpha1.StepPostCheck:
		ok, msg, err := r.evalChecks(ctx, m, mp, post)
		return ok, msg, err
	}
	return false, "", fmt.Errorf("unknown step %q", mp.Step)
}

// kickDue says whether a Machine waiting to boot should get its power
// button pressed: its spec asks for Off and its status reports Off (a
// power cycle stopped between its off and its on), and its step started
// more than BootKick ago. m is the copy the caller read last (cached, or
// confirmed past the cache), so the answer follows the re-read.
func (r *Reconciler) kickDue(s *scope, mp *upgradev1alpha1.MachineProgress, m *machinev1alpha1.Machine) bool {
	return m.EffectivePowerState() == machinev1alpha1.PowerOff && m.Status.PowerState == machinev1alpha1.PowerOff &&
		s.now.Sub(mp.StepStarted.Time) > r.BootKick
}

// machineNode returns the Machine's Node (status.nodeRef, checked against
// its recorded UID, status.providerID and the provider's
// contract.NodeOwnerAnnotation), or nil when it has none. A Node of that
// name that is not the Machine's (replaced under the same name, or never
// registered by its provider) is never returned: why says so, for a step
// that then waits until the Machine's status.nodeRef names its Node again.
func (r *Reconciler) machineNode(ctx context.Context, m *machinev1alpha1.Machine) (node *corev1.Node, why string, err error) {
	if m.Status.NodeRef == nil || m.Status.ProviderID == "" {
		return nil, "", nil
	}
	n := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: m.Status.NodeRef.Name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("reading Node %s: %w", m.Status.NodeRef.Name, err)
	}
	switch {
	case m.Status.NodeRef.UID == "" || n.UID != m.Status.NodeRef.UID:
		why = fmt.Sprintf("Node %s is not the one Machine %s recorded (UID %s, recorded %s): waiting for the Machine's status.nodeRef to name its Node again; that Node is not touched",
			n.Name, m.Name, n.UID, orNone(string(m.Status.NodeRef.UID)))
	case n.Spec.ProviderID != m.Status.ProviderID || n.Annotations[contract.NodeOwnerAnnotation] == "":
		why = fmt.Sprintf("Node %s does not carry Machine %s's providerID and provider-object annotation: waiting for the Machine's status.nodeRef to name its Node again; that Node is not touched",
			n.Name, m.Name)
	default:
		return n, "", nil
	}
	return nil, why, nil
}

// patchMachineSpec writes image, version and the boot device, unless the
// Machine already has them.
func (r *Reconciler) patchMachineSpec(ctx context.Context, m *machinev1alpha1.Machine, image, version string, boot machinev1alpha1.BootDevice, once bool) error {
	if m.Spec.Image == image && m.Spec.Version == version && m.EffectiveBootDevice() == boot && m.Spec.BootOnce == once {
		return nil
	}
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"image": image, "version": version, "bootDevice": boot, "bootOnce": once}})
	if err != nil {
		return err
	}
	if err := r.Patch(ctx, m, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("setting the image of Machine %s: %w", m.Name, err)
	}
	return nil
}

// resetSent looks for the evidence of a power cycle already sent: the
// Machine asked Off (the BMC writes it before it answers) or observed Off,
// or a Node that booted the new image.
func (r *Reconciler) resetSent(ctx context.Context, u *upgradev1alpha1.MachineUpgrade, m *machinev1alpha1.Machine) (bool, string) {
	if m.EffectivePowerState() == machinev1alpha1.PowerOff {
		return true, "the Machine is asked to be Off (a power cycle in progress)"
	}
	if m.Status.PowerState == machinev1alpha1.PowerOff {
		return true, "the Machine is Off"
	}
	if node, _, err := r.machineNode(ctx, m); err == nil && node != nil && node.Annotations[upgradev1alpha1.BootedImageAnnotation] == u.Spec.Image && m.Spec.Image != "" &&
		node.Annotations[upgradev1alpha1.BootedImageAnnotation] != "" && upgradedBefore(u, m) {
		return true, "its Node booted " + u.Spec.Image
	}
	return false, ""
}

// upgradedBefore: the Machine ran another image before the upgrade (else a
// Node showing the target image is no evidence of a reset).
func upgradedBefore(u *upgradev1alpha1.MachineUpgrade, m *machinev1alpha1.Machine) bool {
	mp := u.Status.Machine(m.Name)
	return mp != nil && mp.PreviousImage != u.Spec.Image
}

// redfishReset resets the Machine through its MachineBMC: the published
// Redfish endpoint, the credentials of its auth Secret.
func (r *Reconciler) redfishReset(ctx context.Context, s *scope, m *machinev1alpha1.Machine, resetType string) error {
	l := &bmcv1alpha1.MachineBMCList{}
	if err := r.List(ctx, l, client.InNamespace(m.Namespace)); err != nil {
		return fmt.Errorf("listing MachineBMCs: %w", err)
	}
	var b *bmcv1alpha1.MachineBMC
	for i := range l.Items {
		if l.Items[i].Spec.MachineRef.Name == m.Name && l.Items[i].Status.RedfishEndpoint != "" {
			b = &l.Items[i]
			break
		}
	}
	if b == nil {
		return fmt.Errorf("machine %s has no MachineBMC serving Redfish", m.Name)
	}
	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.AuthSecretRef.Name}, sec); err != nil {
		return fmt.Errorf("reading the credentials of MachineBMC %s: %w", b.Name, err)
	}
	rc := &redfishClient{http: r.HTTPClient, endpoint: b.Status.RedfishEndpoint,
		user: string(sec.Data[bmcv1alpha1.UsernameKey]), password: string(sec.Data[bmcv1alpha1.PasswordKey])}
	rctx, cancel := context.WithTimeout(ctx, timeout(s.u, upgradev1alpha1.StepPowerCycle))
	defer cancel()
	if err := rc.reset(rctx, resetType); err != nil {
		return fmt.Errorf("MachineBMC %s: %w", b.Name, err)
	}
	r.event(s, m, corev1.EventTypeNormal, EventReset, "PowerCycle", "Machine %s: Redfish ComputerSystem.Reset %s sent to MachineBMC %s at %s", m.Name, resetType, b.Name, b.Status.RedfishEndpoint)
	return nil
}

// cameBack reports whether a power-cycled Machine runs the new image: asked
// and observed On, Running and Ready for its current generation, and its
// Node (if it has one) Ready and showing the new image and version where
// its provider records them (KwokMachine does; see docs/upgrades.md).
func (r *Reconciler) cameBack(ctx context.Context, u *upgradev1alpha1.MachineUpgrade, m *machinev1alpha1.Machine) (bool, string, error) {
	var waits []string
	if m.EffectivePowerState() != machinev1alpha1.PowerOn {
		waits = append(waits, "asked to be "+string(m.EffectivePowerState()))
	}
	if m.Status.PowerState != machinev1alpha1.PowerOn {
		waits = append(waits, "observed power "+orNone(string(m.Status.PowerState)))
	}
	if m.Status.ObservedGeneration != m.Generation || m.Status.Phase != machinev1alpha1.PhaseRunning {
		waits = append(waits, "phase "+orNone(string(m.Status.Phase)))
	}
	if m.Spec.Image != u.Spec.Image {
		return false, "", fmt.Errorf("machine %s has image %q, not %q: something else changed it", m.Name, m.Spec.Image, u.Spec.Image)
	}
	if m.Status.NodeRef != nil {
		node, why, err := r.machineNode(ctx, m)
		if err != nil {
			return false, "", err
		}
		if node == nil {
			waits = append(waits, "its Node "+m.Status.NodeRef.Name+orWhy(why))
		} else {
			if !nodeReady(node) {
				waits = append(waits, "Node "+node.Name+" Ready")
			}
			if img, ok := node.Annotations[upgradev1alpha1.BootedImageAnnotation]; ok && img != u.Spec.Image {
				waits = append(waits, fmt.Sprintf("Node %s to boot %s (it booted %s)", node.Name, u.Spec.Image, orNone(img)))
			}
			if v, ok := node.Annotations[upgradev1alpha1.BootedVersionAnnotation]; ok && v != u.Spec.Version {
				waits = append(waits, fmt.Sprintf("Node %s to run version %s (it runs %s)", node.Name, u.Spec.Version, orNone(v)))
			}
		}
	}
	if len(waits) == 0 {
		return true, "", nil
	}
	return false, "waiting for " + strings.Join(waits, ", "), nil
}

func orWhy(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
