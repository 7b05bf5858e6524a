package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pcontract "github.com/converge-dev/converge/pkg/contract"
)

// InstallThirdPartyCRD creates, unless it exists, a namespaced
// CustomResourceDefinition for gvk (a third party's kind, open schema,
// status subresource) and waits until it is established. A non-empty
// contract labels it contract.converge.dev/<contract>: v1alpha1, declaring
// that the kind honours that contract; without one the CRD declares none.
// The CRD stays for the life of the environment (a kind is cluster-wide):
// tests sharing a gvk must agree on its contract.
func (e *Environment) InstallThirdPartyCRD(t testing.TB, gvk schema.GroupVersionKind, contract string) {
	t.Helper()
	open := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(bool)}
	*open.XPreserveUnknownFields = true
	plural := strings.ToLower(gvk.Kind) + "s"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + gvk.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvk.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(gvk.Kind), Kind: gvk.Kind, ListKind: gvk.Kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: gvk.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": *open, "status": *open},
				}},
			}},
		},
	}
	if contract != "" {
		crd.Labels = map[string]string{pcontract.Label(contract): pcontract.Version}
	}
	if err := e.Client.Create(t.Context(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating CustomResourceDefinition %s: %v", crd.Name, err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for CustomResourceDefinition %s to be established: %v", crd.Name, err)
	}
}
