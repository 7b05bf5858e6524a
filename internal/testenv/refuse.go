package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Refusal names what Refuse makes the API server refuse.
type Refusal struct {
	// Namespace limits the refusal to one namespace ("" = every namespace).
	Namespace string
	// Group and Resource name the resource ("" group is the core group;
	// Resource is the plural, e.g. "configmaps", "pods").
	Group, Resource string
	// Operation is CREATE, UPDATE, DELETE or CONNECT.
	Operation admissionregistrationv1.OperationType
	// Names, when set, limits the refusal to objects with these names.
	Names []string
	// Message is the refusal message; the default names the test.
	Message string
}

// Refuse makes the real API server refuse an operation, as an admission
// webhook or policy of the cluster's admin would: a ValidatingAdmissionPolicy
// that always denies, bound to the namespace. It waits until probe, which
// should attempt the operation (a dry run is fine), is refused with the
// policy's message, and removes the policy at the end of the test. It
// returns the message the API server sends and allow, which removes the
// policy at once (without waiting for the API server to drop it: callers
// retry).
func (e *Environment) Refuse(t testing.TB, r Refusal, probe func(ctx context.Context) error) (msg string, allow func()) {
	t.Helper()
	ctx := t.Context()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("refuse-%s-%s-%d", strings.TrimRight(name, "-"), strings.ToLower(string(r.Operation)), time.Now().UnixNano()%1e6)
	msg = r.Message
	if msg == "" {
		msg = fmt.Sprintf("%s %s refused by the test's admission policy %s", r.Operation, r.Resource, name)
	}
	expr := "false"
	if len(r.Names) > 0 {
		quoted := make([]string, len(r.Names))
		for i, n := range r.Names {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		// DELETE has no object: read the name from the old object.
		expr = fmt.Sprintf("!((object != null ? object.metadata.name : oldObject.metadata.name) in [%s])", strings.Join(quoted, ","))
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{r.Operation},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{r.Group}, APIVersions: []string{"*"}, Resources: []string{r.Resource},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: expr, Message: msg}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if r.Namespace != "" {
		binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"kubernetes.io/metadata.name": r.Namespace}}}
	}
	if err := e.Client.Create(ctx, policy); err != nil {
		t.Fatalf("creating the refusing policy: %v", err)
	}
	if err := e.Client.Create(ctx, binding); err != nil {
		t.Fatalf("binding the refusing policy: %v", err)
	}
	allow = func() { e.allow(t, name) }
	t.Cleanup(allow)
	// The API server loads policies asynchronously: wait until it refuses.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := probe(ctx)
		if err != nil && strings.Contains(err.Error(), msg) {
			return msg, allow
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server does not refuse %s %s after 30s (last probe: %v)", r.Operation, r.Resource, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *Environment) allow(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
	defer cancel()
	_ = e.Client.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
	_ = e.Client.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
}
