package database

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
)

func TestComputeStatus(t *testing.T) {
	now := time.Now()
	t.Run("available with a correction", func(t *testing.T) {
		g := NewWithT(t)
		d := &sqlv1alpha1.Database{}
		d.Status.Conditions = []metav1.Condition{{Type: "BackupBeforeDelete", Status: metav1.ConditionTrue, Reason: "X"}}
		s := newScope(d, now)
		s.dbName, s.owner, s.engine, s.available = "db", "db_owner", "postgres", true
		s.corrections = []sqlv1alpha1.DriftCorrection{{Kind: sqlv1alpha1.DriftPasswordReset, Message: "reset"}}
		computeStatus(s)
		g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.ReadyCondition)).To(BeTrue())
		synced := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.SyncedCondition)
		g.Expect(synced.Reason).To(Equal(sqlv1alpha1.DriftCorrectedReason))
		g.Expect(d.Status.LastDriftCorrected.Kind).To(Equal(sqlv1alpha1.DriftPasswordReset))
		g.Expect(d.Status.DriftCorrections).To(Equal(int64(1)))
		g.Expect(meta.FindStatusCondition(d.Status.Conditions, "BackupBeforeDelete")).NotTo(BeNil(), "other controllers' conditions stay")
	})
	t.Run("stalled", func(t *testing.T) {
		g := NewWithT(t)
		d := &sqlv1alpha1.Database{}
		s := newScope(d, now)
		s.fail(sqlv1alpha1.UnsupportedReason, "no extensions on mariadb", true)
		computeStatus(s)
		g.Expect(meta.IsStatusConditionFalse(d.Status.Conditions, sqlv1alpha1.ReadyCondition)).To(BeTrue())
		g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.StalledCondition)).To(BeTrue())
		g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition).Reason).To(Equal(sqlv1alpha1.UnsupportedReason))
		g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.StalledCondition).Reason).To(Equal(sqlv1alpha1.UnsupportedReason))
		// Recovering removes Stalled.
		s = newScope(d, now)
		s.available = true
		computeStatus(s)
		g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.StalledCondition)).To(BeNil())
	})
	t.Run("waiting is not stalled", func(t *testing.T) {
		g := NewWithT(t)
		d := &sqlv1alpha1.Database{}
		s := newScope(d, now)
		s.fail(sqlv1alpha1.InstanceNotReadyReason, "waiting", false)
		computeStatus(s)
		g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition).Reason).To(Equal(sqlv1alpha1.InstanceNotReadyReason))
		g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.StalledCondition)).To(BeNil())
	})
	t.Run("nothing failed and nothing available yet is Provisioning", func(t *testing.T) {
		g := NewWithT(t)
		d := &sqlv1alpha1.Database{}
		d.Generation = 3
		computeStatus(newScope(d, now))
		for _, typ := range []string{sqlv1alpha1.ReadyCondition, sqlv1alpha1.SyncedCondition} {
			c := meta.FindStatusCondition(d.Status.Conditions, typ)
			g.Expect(c).NotTo(BeNil(), typ)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(sqlv1alpha1.ProvisioningReason))
			g.Expect(c.ObservedGeneration).To(Equal(int64(3)))
		}
		g.Expect(meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.StalledCondition)).To(BeNil())
	})
	t.Run("deleting", func(t *testing.T) {
		g := NewWithT(t)
		d := &sqlv1alpha1.Database{}
		s := newScope(d, now)
		s.deleting, s.deletingReason, s.deletingMessage = true, sqlv1alpha1.WaitingForFinalizersReason, "waiting for finalizers x"
		computeStatus(s)
		c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.DeletingCondition)
		g.Expect(c.Reason).To(Equal(sqlv1alpha1.WaitingForFinalizersReason))
		g.Expect(meta.IsStatusConditionFalse(d.Status.Conditions, sqlv1alpha1.ReadyCondition)).To(BeTrue())
	})
}

func TestConnectionURI(t *testing.T) {
	g := NewWithT(t)
	g.Expect(connectionURI("postgres", "db.example", 5432, "u", "p", "d")).To(Equal("postgresql://u:p@db.example:5432/d"))
	g.Expect(connectionURI("mariadb", "::1", 3306, "u", "p", "d")).To(Equal("mysql://u:p@[::1]:3306/d"))
	p, err := generatePassword()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(MatchRegexp(`^[A-Za-z0-9]{32}$`))
}
