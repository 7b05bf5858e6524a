package leaderfence_test

import (
	"errors"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/leaderfence"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The suite needs an API server only: no manager, no controllers.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{NoManager: true}, &env))
}

// TestFenceGatesWrites: behind the fence a write passes only while the
// last successful renewal was sent less than the renew deadline ago, also
// through an impersonating copy of the config; reads always pass.
func TestFenceGatesWrites(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ns := env.NewNamespace(t)
	f := leaderfence.NewFence(time.Second)
	cfg := rest.CopyConfig(env.Config)
	leaderfence.Config(cfg, f)
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	imp := rest.CopyConfig(cfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":default"}
	ic, err := client.New(imp, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}

	g.Expect(c.Create(t.Context(), cm("never-leader"))).To(MatchError(ContainSubstring("write fence")), "closed before the first renewal")
	g.Expect(errors.Is(c.Create(t.Context(), cm("never-leader")), leaderfence.ErrFenced)).To(BeTrue())
	g.Expect(c.List(t.Context(), &corev1.ConfigMapList{}, client.InNamespace(ns))).To(Succeed(), "reads pass")

	f.Renewed(time.Now())
	g.Expect(c.Create(t.Context(), cm("leader"))).To(Succeed())
	f.Renewed(time.Now().Add(-1100 * time.Millisecond)) // older renewals never move the fence back
	g.Expect(c.Create(t.Context(), cm("still-leader"))).To(Succeed())

	time.Sleep(1100 * time.Millisecond) // the renew deadline passes without a renewal
	g.Expect(c.Create(t.Context(), cm("stale"))).To(MatchError(ContainSubstring("write fence")))
	g.Expect(ic.Create(t.Context(), cm("stale-impersonated"))).To(MatchError(ContainSubstring("write fence")))
	g.Expect(c.Delete(t.Context(), cm("leader"))).To(MatchError(ContainSubstring("write fence")))
}
