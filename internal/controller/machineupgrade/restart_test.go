package machineupgrade_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

// sideEffects counts, from watches of the Machines and their Nodes (every
// change the API server stored, whoever wrote it), the side effects of the
// steps: spec.image set to the target (SetImage), spec.powerState set to
// Off (a power cycle the BMC accepted), Node cordoned and uncordoned.
type sideEffects struct {
	mu        sync.Mutex
	images    map[string]int
	powerOffs map[string]int
	cordons   map[string]int
	uncordons map[string]int
}

func (s *sideEffects) get(m map[string]int, k string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m[k]
}

func watchSideEffects(t *testing.T, ns, image string, nodes map[string]string) *sideEffects {
	t.Helper()
	g := NewWithT(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	t.Cleanup(cancel)
	se := &sideEffects{images: map[string]int{}, powerOffs: map[string]int{}, cordons: map[string]int{}, uncordons: map[string]int{}}

	ml := &machinev1alpha1.MachineList{}
	g.Expect(wc.List(ctx, ml, client.InNamespace(ns))).To(Succeed())
	last := map[string]machinev1alpha1.MachineSpec{}
	for _, m := range ml.Items {
		last[m.Name] = m.Spec
	}
	mw, err := wc.Watch(ctx, &machinev1alpha1.MachineList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: ml.ResourceVersion}})
	g.Expect(err).NotTo(HaveOccurred())
	nl := &corev1.NodeList{}
	g.Expect(wc.List(ctx, nl)).To(Succeed())
	lastNode := map[string]bool{}
	for _, n := range nl.Items {
		lastNode[n.Name] = n.Spec.Unschedulable
	}
	nw, err := wc.Watch(ctx, &corev1.NodeList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: nl.ResourceVersion}})
	g.Expect(err).NotTo(HaveOccurred())
	byNode := map[string]string{}
	for m, n := range nodes {
		byNode[n] = m
	}
	go func() {
		defer mw.Stop()
		for ev := range mw.ResultChan() {
			m, ok := ev.Object.(*machinev1alpha1.Machine)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			prev := last[m.Name]
			se.mu.Lock()
			if m.Spec.Image == image && prev.Image != image {
				se.images[m.Name]++
			}
			if m.EffectivePowerState() == machinev1alpha1.PowerOff && prev.PowerState != machinev1alpha1.PowerOff {
				se.powerOffs[m.Name]++
			}
			se.mu.Unlock()
			last[m.Name] = m.Spec
		}
	}()
	go func() {
		defer nw.Stop()
		for ev := range nw.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			m, mine := byNode[n.Name]
			if mine {
				se.mu.Lock()
				if n.Spec.Unschedulable && !lastNode[n.Name] {
					se.cordons[m]++
				}
				if !n.Spec.Unschedulable && lastNode[n.Name] {
					se.uncordons[m]++
				}
				se.mu.Unlock()
			}
			lastNode[n.Name] = n.Spec.Unschedulable
		}
	}()
	return se
}

// The manager (Machine, KwokMachine, BMC and upgrade controllers) is
// stopped at the moment the status shows each step in turn started, and a
// new one is started: the upgrade completes, and every step of every
// Machine ran exactly once, counted by its side effects.
func TestManagerKilledInEveryStep(t *testing.T) {
	testenv.Need(t, env)
	steps := append([]upgradev1alpha1.StepName{upgradev1alpha1.StepPreChecks}, upgradev1alpha1.MachineSteps...)
	steps = append(steps, upgradev1alpha1.StepPostChecks)
	for _, step := range steps {
		t.Run(string(step), func(t *testing.T) {
			g := NewWithT(t)
			ctx := t.Context()
			ns := env.NewNamespace(t)
			stop := startManager(t)
			ms := fleet(t, ns, "k", 2)
			nodes := map[string]string{}
			for _, m := range ms {
				got := &machinev1alpha1.Machine{}
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
				nodes[m.Name] = got.Status.NodeRef.Name
			}
			se := watchSideEffects(t, ns, "v2", nodes)
			u := newUpgrade(ns, "kill", "k", 1)
			u.Spec.Strategy.MaxAttempts = 5
			// Stop the manager the moment the step shows Running, as a
			// watch sees every status write: a step that runs within one
			// reconcile (PostChecks) can start and end between two polls.
			wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
			g.Expect(err).NotTo(HaveOccurred())
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			uw, err := wc.Watch(wctx, &upgradev1alpha1.MachineUpgradeList{}, client.InNamespace(ns))
			g.Expect(err).NotTo(HaveOccurred())
			defer uw.Stop()
			g.Expect(env.Client.Create(ctx, u)).To(Succeed())
			got := &upgradev1alpha1.MachineUpgrade{}
			for seen := false; !seen; {
				ev, ok := <-uw.ResultChan()
				if !ok {
					t.Fatalf("step %s never seen running; last status %+v", step, got.Status)
				}
				if o, isUpgrade := ev.Object.(*upgradev1alpha1.MachineUpgrade); isUpgrade && o.Name == u.Name {
					got, seen = o, running(o, step)
				}
			}
			g.Expect(stop()).To(Succeed())
			t.Logf("stopped the manager with %s running; status: phase %s, current %q", step, got.Status.Phase, got.Status.CurrentStep)

			startManager(t)
			u = waitUpgrade(t, u, func(g Gomega, u *upgradev1alpha1.MachineUpgrade) {
				g.Expect(u.Status.Phase).To(Equal(upgradev1alpha1.PhaseSucceeded), "status %+v", u.Status)
			})
			for _, st := range u.Status.Steps {
				g.Expect(st.State).To(Equal(upgradev1alpha1.StepStateSucceeded))
			}
			// Let the watches catch up, then count.
			time.Sleep(time.Second)
			for _, m := range ms {
				mp := u.Status.Machine(m.Name)
				g.Expect(mp.State).To(Equal(upgradev1alpha1.MachineUpgraded))
				g.Expect(mp.CordonedBy).To(Equal(upgradev1alpha1.CordonedByUpgrade), "%s: recorded once, before its cordon", m.Name)
				g.Expect(se.get(se.images, m.Name)).To(Equal(1), "%s: SetImage side effects", m.Name)
				g.Expect(se.get(se.powerOffs, m.Name)).To(Equal(1), "%s: power cycles (spec.powerState -> Off)", m.Name)
				g.Expect(se.get(se.cordons, m.Name)).To(Equal(1), "%s: cordons", m.Name)
				g.Expect(se.get(se.uncordons, m.Name)).To(Equal(1), "%s: uncordons", m.Name)
			}
			fmt.Fprintf(testWriter{t}, "step %s: every side effect once\n", step)
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// running reports whether the status shows step started and not finished:
// an upgrade step, or the first Machine's step.
func running(u *upgradev1alpha1.MachineUpgrade, step upgradev1alpha1.StepName) bool {
	if st := u.Status.Step(step); st != nil {
		return st.State == upgradev1alpha1.StepStateRunning
	}
	for _, mp := range u.Status.Machines {
		if mp.Step == step && mp.StepState == upgradev1alpha1.StepStateRunning {
			return true
		}
	}
	return false
}
