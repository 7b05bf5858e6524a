package sqlinstance_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
)

func withTLS(obj client.Object, mode sqlv1alpha1.TLSMode, caSecret string) client.Object {
	tls := &sqlv1alpha1.InstanceTLS{Mode: mode}
	if caSecret != "" {
		tls.CASecretRef = &sqlv1alpha1.SecretReference{Name: caSecret}
	}
	obj.(sqlv1alpha1.Instance).InstanceSpec().TLS = tls
	return obj
}

func expectStalled(t *testing.T, inst client.Object, reason, msg string) {
	t.Helper()
	g := NewWithT(t)
	testenv.Eventually(g, func(g Gomega) {
		st := getInstance(g, t, inst)
		g.Expect(st.Ready).To(BeFalse())
		ready := meta.FindStatusCondition(st.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(reason), ready.Message)
		g.Expect(ready.Message).To(ContainSubstring(msg))
		stalled := meta.FindStatusCondition(st.Conditions, sqlv1alpha1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil())
		g.Expect(stalled.Reason).To(Equal(reason))
		// Stalled at the generation it observed: kstatus reads Failed.
		testenv.ExpectKstatus(t.Context(), g, env.Client, inst, kstatus.FailedStatus, reason)
	}).Should(Succeed())
}

func expectReady(t *testing.T, inst client.Object) {
	t.Helper()
	g := NewWithT(t)
	testenv.Eventually(g, func(g Gomega) {
		st := getInstance(g, t, inst)
		ready := meta.FindStatusCondition(st.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(st.Ready).To(BeTrue(), "%s: %s", ready.Reason, ready.Message)
		g.Expect(ready.Reason).To(Equal(sqlv1alpha1.ConnectedReason))
		testenv.ExpectKstatus(t.Context(), g, env.Client, inst, kstatus.CurrentStatus, "")
	}).Should(Succeed())
}

// TestTLSModes: the default mode is Require and works on a server with
// TLS; VerifyFull really verifies (the server's CA: Ready; another CA:
// TLSVerificationFailed); a server without TLS fails the default with
// TLSUnavailable and a message saying what to do, and works only with an
// explicit tls.mode Disable.
func TestTLSModes(t *testing.T) {
	testenv.Need(t, env)
	for _, s := range servers() {
		t.Run(s.kind, func(t *testing.T) {
			sqltest.Need(t, s.srv, sqlengine.Engine(s.name))
			g := NewWithT(t)
			ctx := t.Context()
			ns := env.NewNamespace(t)
			g.Expect(env.Client.Create(ctx, adminSecret(ns, "admin", s.srv.AdminUser, s.srv.AdminPassword))).To(Succeed())
			other, err := sqltest.NewCAPEM()
			g.Expect(err).NotTo(HaveOccurred())
			for name, pem := range map[string][]byte{"right-ca": s.srv.CAPEM, "wrong-ca": other} {
				g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
					Data: map[string][]byte{"ca.crt": pem}})).To(Succeed())
			}

			def := newInstance(s.srv, ns, "default", "admin", s.srv.Port)
			g.Expect(env.Client.Create(ctx, def)).To(Succeed())
			g.Expect(def.(sqlv1alpha1.Instance).InstanceSpec().TLS.Mode).To(Equal(sqlv1alpha1.TLSRequire), "defaulted by the webhook")
			expectReady(t, def)

			verified := withTLS(newInstance(s.srv, ns, "verified", "admin", s.srv.Port), sqlv1alpha1.TLSVerifyFull, "right-ca")
			g.Expect(env.Client.Create(ctx, verified)).To(Succeed())
			expectReady(t, verified)

			wrong := withTLS(newInstance(s.srv, ns, "wrong-ca", "admin", s.srv.Port), sqlv1alpha1.TLSVerifyFull, "wrong-ca")
			g.Expect(env.Client.Create(ctx, wrong)).To(Succeed())
			expectStalled(t, wrong, sqlv1alpha1.TLSVerificationFailedReason, `did not verify against the CA in Secret "wrong-ca"`)

			start := sqltest.StartPostgresWith
			if s.srv.Engine == sqlengine.MariaDB {
				start = sqltest.StartMariaDBWith
			}
			plain, err := start(ctx, sqltest.Options{NoTLS: true})
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(func() { _ = plain.Stop() })
			g.Expect(env.Client.Create(ctx, adminSecret(ns, "plain-admin", plain.AdminUser, plain.AdminPassword))).To(Succeed())
			noTLS := newInstance(plain, ns, "no-tls", "plain-admin", plain.Port)
			g.Expect(env.Client.Create(ctx, noTLS)).To(Succeed())
			expectStalled(t, noTLS, sqlv1alpha1.TLSUnavailableReason, "set tls.mode: Disable explicitly")

			disabled := withTLS(newInstance(plain, ns, "disabled", "plain-admin", plain.Port), sqlv1alpha1.TLSDisable, "")
			g.Expect(env.Client.Create(ctx, disabled)).To(Succeed())
			expectReady(t, disabled)
		})
	}
}
