package database_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/sqltest"
	"github.com/converge-dev/converge/internal/testenv"
	pcontract "github.com/converge-dev/converge/pkg/contract"
)

// TestThirdPartyInstanceKind: a kind Converge has never heard of (its CRD is
// created here, its status written by "its controller", the test) works as
// an instance as long as it honours the contract; the Database controller
// starts watching it, and reports a contract violation clearly.
func TestThirdPartyInstanceKind(t *testing.T) {
	testenv.Need(t, env)
	sqltest.Need(t, pg, sqlengine.Postgres)
	g := NewWithT(t)
	ctx := t.Context()
	gvk := schema.GroupVersionKind{Group: "thirdparty.example.com", Version: "v1", Kind: "CockroachInstance"}
	crd := &apiextensionsv1.CustomResourceDefinition{
		// The label declares the contract: without it no Database may
		// name the kind.
		ObjectMeta: metav1.ObjectMeta{Name: "cockroachinstances.thirdparty.example.com",
			Labels: map[string]string{pcontract.Label(pcontract.DatabaseInstance): pcontract.Version}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvk.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "cockroachinstances", Singular: "cockroachinstance", Kind: gvk.Kind, ListKind: gvk.Kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}},
			}},
		},
	}
	g.Expect(env.Client.Create(ctx, crd)).To(Succeed()) // a cluster admin installs a provider's CRD
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd)).To(Succeed())
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		g.Expect(established).To(BeTrue())
	}).Should(Succeed())

	ns := env.NewNamespace(t)
	g.Expect(env.Tenant.Create(ctx, &corev1.Secret{ObjectMeta: objMeta(ns, "crdb-admin"),
		StringData: map[string]string{"username": pg.AdminUser, "password": pg.AdminPassword}})).To(Succeed())
	inst := &unstructured.Unstructured{}
	inst.SetGroupVersionKind(gvk)
	inst.SetNamespace(ns)
	inst.SetName("crdb")
	inst.Object["spec"] = map[string]any{"anything": "the provider wants"}
	g.Expect(env.Client.Create(ctx, inst)).To(Succeed()) // a third-party kind the tenant roles do not cover
	setStatus := func(status map[string]any) {
		t.Helper()
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
		status["observedGeneration"] = inst.GetGeneration()
		inst.Object["status"] = status
		g.Expect(env.Client.Status().Update(ctx, inst)).To(Succeed())
	}
	setStatus(map[string]any{
		"ready": true, "engine": "postgres", "version": "15 (third party)",
		"endpoint":       map[string]any{"host": pg.Host, "port": int64(pg.Port)},
		"adminSecretRef": map[string]any{"name": "crdb-admin"},
	})

	d := &sqlv1alpha1.Database{ObjectMeta: objMeta(ns, "via-contract"), Spec: sqlv1alpha1.DatabaseSpec{
		InstanceRef:    sqlv1alpha1.InstanceReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: "crdb"},
		DatabaseName:   "via_contract",
		DeletionPolicy: sqlv1alpha1.DeletionDelete,
	}}
	g.Expect(env.Tenant.Create(ctx, d)).To(Succeed())
	waitReady(t, d)
	g.Expect(d.Status.Engine).To(Equal("postgres"))
	g.Expect(dbExists(t, pg, "via_contract")).To(BeTrue())

	// A status that breaks the contract is reported, not guessed at; the
	// instance is watched, so no poke is needed.
	setStatus(map[string]any{"ready": true, "engine": "oracle"})
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		c := meta.FindStatusCondition(d.Status.Conditions, sqlv1alpha1.ReadyCondition)
		g.Expect(c.Reason).To(Equal(sqlv1alpha1.ContractViolationReason))
		g.Expect(c.Message).To(ContainSubstring(`status.engine must be one of postgres, mariadb (is "oracle")`))
		g.Expect(meta.IsStatusConditionTrue(d.Status.Conditions, sqlv1alpha1.StalledCondition)).To(BeTrue())
	}).Should(Succeed())
	g.Expect(dbExists(t, pg, "via_contract")).To(BeTrue(), "nothing is dropped on a broken contract")
}
