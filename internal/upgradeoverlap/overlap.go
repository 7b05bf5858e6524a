// Package upgradeoverlap decides whether two MachineUpgrades share
// Machines, and which of them goes first. The admission webhook refuses a
// new MachineUpgrade that shares a Machine with an unfinished one; the
// controller applies the same rule again before it touches a Machine, for
// what admission cannot see: two MachineUpgrades admitted at the same moment
// (each webhook call listed before the other was stored), and one stored
// while the webhook was not called.
//
// The order is total and the same for every reader: the oldest by
// creationTimestamp first, then by name. An upgrade that has claimed its
// Machines (status.machines is set) also goes before one that has not, and
// one that has started a Machine is never overtaken, so a MachineUpgrade
// created later but ordered first (the timestamp has a one-second
// granularity) never overtakes one already under way.
package upgradeoverlap

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

// Conflict is another MachineUpgrade that shares Machines with the one
// asked about.
type Conflict struct {
	// Other is the MachineUpgrade that goes first.
	Other *upgradev1alpha1.MachineUpgrade
	// Shared names the Machines both upgrade (at most five, then "and N
	// more").
	Shared []string
}

// Message says who holds the Machines, for a webhook refusal or a
// condition.
func (c *Conflict) Message() string {
	o := c.Other
	phase := o.Status.Phase
	if phase == "" {
		phase = upgradev1alpha1.PhasePending
	}
	if !o.DeletionTimestamp.IsZero() {
		return fmt.Sprintf("MachineUpgrade %s (phase %s, being deleted) still upgrades Machine(s) %s; wait until it is gone",
			o.Name, phase, strings.Join(c.Shared, ", "))
	}
	return fmt.Sprintf("MachineUpgrade %s (phase %s) already upgrades Machine(s) %s; wait for it to finish, or abort it",
		o.Name, phase, strings.Join(c.Shared, ", "))
}

// Before reports whether a goes before b: created earlier, or in the same
// second with a smaller name.
func Before(a, b *upgradev1alpha1.MachineUpgrade) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// Claimed reports whether u has fixed its set of Machines (the Machines
// step started).
func Claimed(u *upgradev1alpha1.MachineUpgrade) bool { return len(u.Status.Machines) > 0 }

// First returns the first MachineUpgrade of others, in the order of Before,
// that is unfinished, shares a Machine of ms with u (selects it, or lists
// it in its status once it has claimed its Machines) and for which yield
// is true; or nil. u itself is skipped. One being deleted counts while it
// holds the upgrade finalizer: its controller may still take back its
// cordons. ms are the Machines u selects, or lists once it has claimed.
// others is not changed.
func First(u *upgradev1alpha1.MachineUpgrade, others []upgradev1alpha1.MachineUpgrade, ms []machinev1alpha1.Machine, yield func(o *upgradev1alpha1.MachineUpgrade) bool) *Conflict {
	others = slices.Clone(others)
	sort.Slice(others, func(i, j int) bool { return Before(&others[i], &others[j]) })
	for i := range others {
		o := &others[i]
		deleting := !o.DeletionTimestamp.IsZero()
		if o.Name == u.Name || o.Finished() || (deleting && !controllerutil.ContainsFinalizer(o, upgradev1alpha1.MachineUpgradeFinalizer)) {
			continue
		}
		osel, err := metav1.LabelSelectorAsSelector(&o.Spec.Selector)
		if err != nil {
			continue
		}
		var shared []string
		for _, m := range ms {
			if o.Status.Machine(m.Name) != nil || (!Claimed(o) && osel.Matches(labels.Set(m.Labels))) {
				shared = append(shared, m.Name)
			}
		}
		if len(shared) == 0 || !yield(o) {
			continue
		}
		if len(shared) > 5 {
			shared = append(shared[:5], fmt.Sprintf("and %d more", len(shared)-5))
		}
		return &Conflict{Other: o, Shared: shared}
	}
	return nil
}

// Any is the yield of admission: a new MachineUpgrade gives way to every
// unfinished one it shares a Machine with.
func Any(*upgradev1alpha1.MachineUpgrade) bool { return true }

// Blocking returns the MachineUpgrade u waits for before it touches a
// Machine, or nil: none while u has started one (it gives way to nobody
// then), else the first of others that shares a Machine with u and goes
// first (GoesFirst).
func Blocking(u *upgradev1alpha1.MachineUpgrade, others []upgradev1alpha1.MachineUpgrade, ms []machinev1alpha1.Machine) *Conflict {
	if Started(u) {
		return nil
	}
	return First(u, others, ms, GoesFirst(u))
}

// GoesFirst returns the yield of the controller for u, which has not
// touched a Machine yet: u gives way to an upgrade that has (Started), to
// one ordered before it
// (Before), and, while u has not claimed its Machines, also to one that
// has. An upgrade that has started a Machine gives way to nobody; the
// controller does not ask. Since every reader of the same MachineUpgrades
// (read from the API server, not a cache) reaches the same answer, of two
// that share Machines at most one starts one: the one that claimed
// second, or is ordered second, finds the other in the read it makes after
// its own claim, and gives its claim back before any side effect.
func GoesFirst(u *upgradev1alpha1.MachineUpgrade) func(o *upgradev1alpha1.MachineUpgrade) bool {
	return func(o *upgradev1alpha1.MachineUpgrade) bool {
		return Started(o) || Before(o, u) || (Claimed(o) && !Claimed(u))
	}
}

// Started reports whether u has started a Machine (one is past Pending):
// from then on u has side effects to finish or take back.
func Started(u *upgradev1alpha1.MachineUpgrade) bool {
	for _, mp := range u.Status.Machines {
		if mp.State != upgradev1alpha1.MachinePending {
			return true
		}
	}
	return false
}
