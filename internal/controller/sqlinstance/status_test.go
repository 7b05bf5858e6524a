package sqlinstance

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
)

func TestComputeStatusPublishesTheContractOnlyWhenReady(t *testing.T) {
	g := NewWithT(t)
	inst := &sqlv1alpha1.PostgresInstance{Spec: sqlv1alpha1.InstanceSpec{Host: "db", AdminSecretRef: sqlv1alpha1.SecretReference{Name: "admin"}}}
	inst.Generation = 3
	s := &scope{inst: inst, engine: sqlv1alpha1.EnginePostgres, port: 5432, ready: true, version: "15.4"}
	computeStatus(s)
	st := inst.Status
	g.Expect(st.Ready).To(BeTrue())
	g.Expect(st.Endpoint).To(Equal(&sqlv1alpha1.Endpoint{Host: "db", Port: 5432}))
	g.Expect(st.AdminSecretRef.Name).To(Equal("admin"))
	g.Expect(st.Engine).To(Equal(sqlv1alpha1.EnginePostgres))
	g.Expect(meta.IsStatusConditionTrue(st.Conditions, sqlv1alpha1.ReadyCondition)).To(BeTrue())

	s = &scope{inst: inst, engine: sqlv1alpha1.EnginePostgres, port: 5432}
	s.fail(sqlv1alpha1.AuthenticationFailedReason, "refused", true)
	computeStatus(s)
	st = inst.Status
	g.Expect(st.Ready).To(BeFalse())
	g.Expect(st.Endpoint).To(BeNil(), "a failed check withdraws the endpoint")
	g.Expect(st.AdminSecretRef).To(BeNil())
	g.Expect(meta.FindStatusCondition(st.Conditions, sqlv1alpha1.StalledCondition).Reason).To(Equal(sqlv1alpha1.AuthenticationFailedReason))

	s = &scope{inst: inst, engine: sqlv1alpha1.EnginePostgres, port: 5432}
	s.fail(sqlv1alpha1.UnreachableReason, "timeout", false)
	computeStatus(s)
	g.Expect(meta.FindStatusCondition(inst.Status.Conditions, sqlv1alpha1.StalledCondition)).To(BeNil(), "unreachable is retried, not stalled")
}
