package machinebmc

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

func TestComputeStatus(t *testing.T) {
	nf := apierrors.NewNotFound(schema.GroupResource{Resource: "x"}, "x")
	ep := bmc.Endpoints{IPMI: "127.0.0.1:1", Redfish: "https://127.0.0.1:2"}
	for _, tc := range []struct {
		name        string
		s           scope
		ready       string
		readyStatus bool
	}{
		{"machine missing", scope{machineErr: nf}, bmcv1alpha1.MachineNotFoundReason, false},
		{"secret missing", scope{secretErr: nf}, bmcv1alpha1.SecretNotFoundReason, false},
		{"secret invalid", scope{secretErr: errSecretInvalid{why: "x"}}, bmcv1alpha1.SecretInvalidReason, false},
		{"probe failed", scope{ep: ep, probed: true, probeErr: errors.New("no answer")}, bmcv1alpha1.ProbeFailedReason, false},
		{"serving", scope{ep: ep, probed: true}, bmcv1alpha1.ServingReason, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.b = &bmcv1alpha1.MachineBMC{}
			computeStatus(&s)
			if got := creconcile.Reason(s.b.Status.Conditions, bmcv1alpha1.ReadyCondition); got != tc.ready {
				t.Fatalf("Ready reason = %q, want %q", got, tc.ready)
			}
			if creconcile.IsTrue(s.b.Status.Conditions, bmcv1alpha1.ReadyCondition) != tc.readyStatus {
				t.Fatalf("Ready status wrong: %+v", s.b.Status.Conditions)
			}
		})
	}
	if ValidateCredentials("admin", "012345678901234567890") == "" || ValidateCredentials("", "x") == "" || ValidateCredentials("a", "b") == "" ||
		ValidateCredentials("a", "1234567") == "" || ValidateCredentials("a", "12345678") != "" {
		t.Fatal("ValidateCredentials")
	}
}
