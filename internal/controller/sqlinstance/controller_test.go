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
	"github.com/converge-dev/converge/pkg/contract/databaseinstance/conformance"
)

func adminSecret(ns, name, user, password string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		StringData: map[string]string{"username": user, "password": password}}
}

// newInstance returns a PostgresInstance or MariaDBInstance for srv.
func newInstance(srv *sqltest.Server, ns, name, secret string, port int) client.Object {
	spec := sqlv1alpha1.InstanceSpec{Host: srv.Host, Port: int32(port), AdminSecretRef: sqlv1alpha1.SecretReference{Name: secret}}
	om := metav1.ObjectMeta{Namespace: ns, Name: name}
	if srv.Engine == sqlengine.MariaDB {
		return &sqlv1alpha1.MariaDBInstance{ObjectMeta: om, Spec: spec}
	}
	return &sqlv1alpha1.PostgresInstance{ObjectMeta: om, Spec: spec}
}

func servers() []struct {
	name string
	srv  *sqltest.Server
	kind string
} {
	return []struct {
		name string
		srv  *sqltest.Server
		kind string
	}{{"postgres", pg, "PostgresInstance"}, {"mariadb", maria, "MariaDBInstance"}}
}

// TestContractConformance runs the reusable conformance test against both
// built-in instance kinds.
func TestContractConformance(t *testing.T) {
	testenv.Need(t, env)
	for _, s := range servers() {
		t.Run(s.kind, func(t *testing.T) {
			sqltest.Need(t, s.srv, sqlengine.Engine(s.name))
			ns := env.NewNamespace(t)
			create := func(t *testing.T, name, password string) {
				g := NewWithT(t)
				g.Expect(env.Client.Create(t.Context(), adminSecret(ns, name+"-admin", s.srv.AdminUser, password))).To(Succeed())
				g.Expect(env.Client.Create(t.Context(), newInstance(s.srv, ns, name, name+"-admin", s.srv.Port))).To(Succeed())
			}
			conformance.Run(t, conformance.Harness{
				Client: env.Client, Namespace: ns, GVK: sqlv1alpha1.GroupVersion.WithKind(s.kind),
				NewReady:     func(t *testing.T, name string) { create(t, name, s.srv.AdminPassword) },
				NewBroken:    func(t *testing.T, name string) { create(t, name, "wrong-password") },
				BrokenReason: sqlv1alpha1.AuthenticationFailedReason,
			})
		})
	}
}

func getInstance(g Gomega, t *testing.T, obj client.Object) *sqlv1alpha1.InstanceStatus {
	g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj.(sqlv1alpha1.Instance).InstanceStatus()
}

// TestWrongAdminPasswordStallsUntilFixed: a refused login is Stalled with
// reason AuthenticationFailed; fixing the Secret makes the instance Ready
// without touching the instance (the Secret is watched).
func TestWrongAdminPasswordStallsUntilFixed(t *testing.T) {
	testenv.Need(t, env)
	for _, s := range servers() {
		t.Run(s.kind, func(t *testing.T) {
			sqltest.Need(t, s.srv, sqlengine.Engine(s.name))
			g := NewWithT(t)
			ns := env.NewNamespace(t)
			sec := adminSecret(ns, "admin", s.srv.AdminUser, "wrong")
			g.Expect(env.Client.Create(t.Context(), sec)).To(Succeed())
			inst := newInstance(s.srv, ns, "db", "admin", s.srv.Port)
			g.Expect(env.Client.Create(t.Context(), inst)).To(Succeed())
			testenv.Eventually(g, func(g Gomega) {
				st := getInstance(g, t, inst)
				g.Expect(st.Ready).To(BeFalse())
				stalled := meta.FindStatusCondition(st.Conditions, sqlv1alpha1.StalledCondition)
				g.Expect(stalled).NotTo(BeNil())
				g.Expect(stalled.Reason).To(Equal(sqlv1alpha1.AuthenticationFailedReason))
				g.Expect(stalled.Message).To(ContainSubstring(`admin credentials in Secret "admin"`))
				g.Expect(meta.IsStatusConditionFalse(st.Conditions, sqlv1alpha1.ReadyCondition)).To(BeTrue())
			}).Should(Succeed())

			base := sec.DeepCopy()
			sec.StringData = map[string]string{"password": s.srv.AdminPassword}
			g.Expect(env.Client.Patch(t.Context(), sec, client.MergeFrom(base))).To(Succeed())
			testenv.Eventually(g, func(g Gomega) {
				st := getInstance(g, t, inst)
				g.Expect(st.Ready).To(BeTrue())
				g.Expect(st.Engine).To(Equal(sqlv1alpha1.Engine(s.name)))
				g.Expect(st.Version).NotTo(BeEmpty())
				g.Expect(st.Endpoint).To(Equal(&sqlv1alpha1.Endpoint{Host: s.srv.Host, Port: int32(s.srv.Port)}))
				g.Expect(meta.FindStatusCondition(st.Conditions, sqlv1alpha1.StalledCondition)).To(BeNil())
			}).Should(Succeed())
		})
	}
}

// TestUnreachableServerIsNotReady: nothing listening is Ready=False with
// reason Unreachable, and not Stalled (it is retried).
func TestUnreachableServerIsNotReady(t *testing.T) {
	testenv.Need(t, env)
	for _, s := range servers() {
		t.Run(s.kind, func(t *testing.T) {
			sqltest.Need(t, s.srv, sqlengine.Engine(s.name))
			g := NewWithT(t)
			ns := env.NewNamespace(t)
			port, err := testenv.FreePort()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(env.Client.Create(t.Context(), adminSecret(ns, "admin", s.srv.AdminUser, s.srv.AdminPassword))).To(Succeed())
			inst := newInstance(s.srv, ns, "gone", "admin", port)
			g.Expect(env.Client.Create(t.Context(), inst)).To(Succeed())
			testenv.Eventually(g, func(g Gomega) {
				st := getInstance(g, t, inst)
				g.Expect(st.Ready).To(BeFalse())
				ready := meta.FindStatusCondition(st.Conditions, sqlv1alpha1.ReadyCondition)
				g.Expect(ready).NotTo(BeNil())
				g.Expect(ready.Reason).To(Equal(sqlv1alpha1.UnreachableReason))
				g.Expect(ready.Message).To(ContainSubstring("cannot reach 127.0.0.1"))
				g.Expect(meta.FindStatusCondition(st.Conditions, sqlv1alpha1.StalledCondition)).To(BeNil())
				// Retried: kstatus reads it InProgress with the reason.
				testenv.ExpectKstatus(t.Context(), g, env.Client, inst, kstatus.InProgressStatus, sqlv1alpha1.UnreachableReason)
			}).Should(Succeed())
		})
	}
}

// TestAdminSecretInvalid: an admin Secret that does not exist, or lacks the
// password key, is Stalled with reason AdminSecretInvalid naming the Secret
// and what is wrong; no login is tried. Creating, then fixing, the Secret
// makes the instance Ready (Connected) without touching the instance.
func TestAdminSecretInvalid(t *testing.T) {
	testenv.Need(t, env)
	for _, s := range servers() {
		t.Run(s.kind, func(t *testing.T) {
			sqltest.Need(t, s.srv, sqlengine.Engine(s.name))
			g := NewWithT(t)
			ns := env.NewNamespace(t)
			inst := newInstance(s.srv, ns, "db", "admin", s.srv.Port)
			g.Expect(env.Client.Create(t.Context(), inst)).To(Succeed())
			expectStalled(t, inst, sqlv1alpha1.AdminSecretInvalidReason, `the admin Secret "admin" does not exist`)

			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admin"},
				StringData: map[string]string{"username": s.srv.AdminUser}}
			g.Expect(env.Client.Create(t.Context(), sec)).To(Succeed())
			expectStalled(t, inst, sqlv1alpha1.AdminSecretInvalidReason, `the admin Secret "admin" needs the keys username and password`)

			base := sec.DeepCopy()
			sec.StringData = map[string]string{"password": s.srv.AdminPassword}
			g.Expect(env.Client.Patch(t.Context(), sec, client.MergeFrom(base))).To(Succeed())
			expectReady(t, inst)

			// A CA Secret that does not exist cannot be acted on either.
			tls := withTLS(newInstance(s.srv, ns, "tls", "admin", s.srv.Port), sqlv1alpha1.TLSVerifyFull, "no-such-ca")
			g.Expect(env.Client.Create(t.Context(), tls)).To(Succeed())
			expectStalled(t, tls, sqlv1alpha1.InvalidSpecReason, `reading the CA Secret "no-such-ca"`)
		})
	}
}
