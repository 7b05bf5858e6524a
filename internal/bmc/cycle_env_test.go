package bmc_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrastructurev1alpha1 "github.com/converge-dev/converge/api/infrastructure/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The package's other tests need no control plane; this one runs on the
// real one, with no controller (the test plays the Machine controller).
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{NoManager: true}, &env))
}

// laggingCache reads through a direct client, but for lag after each of
// the backend's patches it answers with the object as it was before the
// patch: the manager's cache behind its own write, as under load.
type laggingCache struct {
	*testenv.StaleClient
	lag time.Duration
	// fail: patches after the first that fail (the API server refusing
	// for a moment).
	fail int

	mu      sync.Mutex
	patches int
}

func (c *laggingCache) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	c.mu.Lock()
	c.patches++
	fail := c.patches > 1 && c.patches <= 1+c.fail
	c.mu.Unlock()
	if fail {
		return errors.New("injected: the API server is unavailable")
	}
	before := &machinev1alpha1.Machine{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(obj), before); err != nil {
		return err
	}
	if err := c.Client.Patch(ctx, obj, p, opts...); err != nil {
		return err
	}
	c.Pin(before, time.Now().Add(c.lag))
	return nil
}

// A power cycle powers the Machine back on even when the cache still
// shows the Machine from before the cycle's Off write: a stale copy
// (spec.powerState On) is not "someone asked for On meanwhile". It left
// Machines off for good under load (the upgrade benchmark's floor hung on
// one, and the upgrade controller's BootKick hid it). A failed On write is
// tried again, not given up.
func TestPowerCycleOutlivesALaggingCache(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	km := &infrastructurev1alpha1.KwokMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}}
	g.Expect(env.Client.Create(ctx, km)).To(Succeed())
	m := &machinev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
		Spec: machinev1alpha1.MachineSpec{InfrastructureRef: machinev1alpha1.InfrastructureReference{
			APIVersion: infrastructurev1alpha1.GroupVersion.String(), Kind: "KwokMachine", Name: "m",
		}},
	}
	g.Expect(env.Client.Create(ctx, m)).To(Succeed())
	setObserved := func(p machinev1alpha1.PowerState) {
		t.Helper()
		base := m.DeepCopy()
		m.Status.PowerState = p
		g.Expect(env.Client.Status().Patch(ctx, m, client.MergeFrom(base))).To(Succeed())
	}
	setObserved(machinev1alpha1.PowerOn)

	key := types.NamespacedName{Namespace: ns, Name: "m"}
	g.Expect(bmc.Cycle(ctx, &laggingCache{StaleClient: testenv.NewStaleClient(env.Client), lag: time.Second, fail: 2}, key)).To(Succeed())
	g.Expect(env.Client.Get(ctx, key, m)).To(Succeed())
	g.Expect(m.Spec.PowerState).To(Equal(machinev1alpha1.PowerOff), "the cycle asks for Off before it answers")
	// The Machine controller's part: the machine is off.
	setObserved(machinev1alpha1.PowerOff)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, key, m)).To(Succeed())
		g.Expect(m.Spec.PowerState).To(Equal(machinev1alpha1.PowerOn))
	}).WithTimeout(10*time.Second).WithPolling(50*time.Millisecond).Should(Succeed(), "the power cycle never asked for On again")
}
