package bmc_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	webhookbmc "github.com/converge-dev/converge/internal/webhook/bmc"
)

func machineBMC() *bmcv1alpha1.MachineBMC {
	return &bmcv1alpha1.MachineBMC{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
		Spec: bmcv1alpha1.MachineBMCSpec{MachineRef: bmcv1alpha1.LocalObjectReference{Name: "m"}, AuthSecretRef: bmcv1alpha1.LocalObjectReference{Name: "m-bmc"},
			Protocols: []bmcv1alpha1.Protocol{bmcv1alpha1.ProtocolIPMI, bmcv1alpha1.ProtocolRedfish}}}
}

// TestValidateCreate: each refusal names the field.
func TestValidateCreate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(b *bmcv1alpha1.MachineBMC)
		want   string // empty: valid
	}{
		{"valid", func(*bmcv1alpha1.MachineBMC) {}, ""},
		{"bad machineRef", func(b *bmcv1alpha1.MachineBMC) { b.Spec.MachineRef.Name = "M_1" }, "spec.machineRef.name: Invalid value"},
		{"bad authSecretRef", func(b *bmcv1alpha1.MachineBMC) { b.Spec.AuthSecretRef.Name = "" }, "spec.authSecretRef.name: Invalid value"},
		{"protocol twice", func(b *bmcv1alpha1.MachineBMC) {
			b.Spec.Protocols = append(b.Spec.Protocols, bmcv1alpha1.ProtocolIPMI)
		}, "spec.protocols[2]: Duplicate value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			b := machineBMC()
			tt.mutate(b)
			_, err := webhookbmc.MachineBMC{}.ValidateCreate(context.Background(), b)
			if tt.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// TestValidateUpdate: machineRef is immutable; other changes pass, and so
// does a metadata-only change of an invalid object.
func TestValidateUpdate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	old := machineBMC()
	cur := old.DeepCopy()
	cur.Spec.MachineRef.Name = "other"
	_, err := webhookbmc.MachineBMC{}.ValidateUpdate(ctx, old, cur)
	g.Expect(err).To(MatchError(ContainSubstring("spec.machineRef: Invalid value")))

	cur = old.DeepCopy()
	cur.Spec.AuthSecretRef.Name = "other"
	_, err = webhookbmc.MachineBMC{}.ValidateUpdate(ctx, old, cur)
	g.Expect(err).NotTo(HaveOccurred())

	old.Spec.AuthSecretRef.Name = "Bad_Name"
	cur = old.DeepCopy()
	cur.Labels = map[string]string{"x": "y"}
	_, err = webhookbmc.MachineBMC{}.ValidateUpdate(ctx, old, cur)
	g.Expect(err).NotTo(HaveOccurred(), "metadata-only changes pass")
	_, err = webhookbmc.MachineBMC{}.ValidateDelete(ctx, old)
	g.Expect(err).NotTo(HaveOccurred())
}
