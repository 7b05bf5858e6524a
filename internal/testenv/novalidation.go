package testenv

import (
	"context"
	"fmt"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/install"
)

// NoValidationLabel is a label that, set on an object, makes Converge's validating webhooks
// skip it once a test has called SkipValidationForLabelled. It stands for
// objects stored before a validation rule existed (or written while the
// webhook was down): the controllers must still refuse them, with a status.
const NoValidationLabel = "testenv.converge.dev/no-validation"

// SkipValidationForLabelled excludes objects labelled NoValidationLabel from
// every webhook of Converge's ValidatingWebhookConfiguration (an
// objectSelector, DoesNotExist). Unlabelled objects are validated exactly as
// before, so tests running in parallel are not affected; the change stays for
// the life of the environment. The API server picks it up asynchronously:
// retry the write until it is accepted.
func (e *Environment) SkipValidationForLabelled(t testing.TB) {
	t.Helper()
	ctx := t.Context()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		return e.skipValidation(ctx)
	}); err != nil {
		t.Fatalf("excluding labelled objects from validation: %v", err)
	}
}

func (e *Environment) skipValidation(ctx context.Context) error {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: install.ValidatingWebhookConfigurationName}, cfg); err != nil {
		return fmt.Errorf("reading the validating webhook configuration: %w", err)
	}
	base := cfg.DeepCopy()
	skip := metav1.LabelSelectorRequirement{Key: NoValidationLabel, Operator: metav1.LabelSelectorOpDoesNotExist}
	changed := false
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		if w.ObjectSelector == nil {
			w.ObjectSelector = &metav1.LabelSelector{}
		}
		if !slices.ContainsFunc(w.ObjectSelector.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool { return r.Key == NoValidationLabel }) {
			w.ObjectSelector.MatchExpressions = append(w.ObjectSelector.MatchExpressions, skip)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return e.Client.Patch(ctx, cfg, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}
