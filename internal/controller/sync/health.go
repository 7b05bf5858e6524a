package sync

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/expr"
)

// healthPoll is how often a Sync waiting for health looks again.
const healthPoll = 2 * time.Second

type healthChecker struct {
	current, failed *expr.Program
}

// checkHealth evaluates every applied object. Unhealthy objects keep the
// Sync Reconciling until spec.timeout, then HealthCheckFailed.
func (r *Reconciler) checkHealth(ctx context.Context, s *scope, c client.Client, objs []*unstructured.Unstructured) (ctrl.Result, error) {
	sy := s.sync
	checks := map[schema.GroupVersionKind]healthChecker{}
	for _, h := range sy.Spec.HealthChecks {
		cur, err := expr.Compile(h.Current)
		if err != nil {
			return ctrl.Result{}, err
		}
		hc := healthChecker{current: cur}
		if h.Failed != "" {
			if hc.failed, err = expr.Compile(h.Failed); err != nil {
				return ctrl.Result{}, err
			}
		}
		checks[schema.FromAPIVersionAndKind(h.APIVersion, h.Kind)] = hc
	}
	var pending, failed []string
	for _, d := range objs {
		if !sy.Spec.Wait {
			if _, custom := checks[d.GroupVersionKind()]; !custom {
				continue
			}
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(d.GroupVersionKind())
		key := client.ObjectKey{Namespace: r.namespaceOf(sy, d), Name: d.GetName()}
		if err := c.Get(ctx, key, live); err != nil {
			if apierrors.IsNotFound(err) {
				pending = append(pending, refString(refOf(d))+" (not found)")
				continue
			}
			ref := refOf(d)
			ref.Namespace = key.Namespace
			err = readError("checking the health of "+refString(ref), err)
			if isForbiddenRead(err) {
				// No check is evaluated on an object the identity cannot read.
				s.fail(gitopsv1alpha1.ReadForbiddenReason, false, "revision %s: %v", s.revision, err)
				return ctrl.Result{RequeueAfter: s.retryAfter()}, nil
			}
			return ctrl.Result{}, err
		}
		ok, bad, msg := health(live, checks)
		switch {
		case bad:
			failed = append(failed, refString(refOf(live))+": "+msg)
		case !ok:
			pending = append(pending, refString(refOf(live))+": "+msg)
		}
	}
	t, f := true, false
	switch {
	case len(failed) > 0:
		s.healthy, s.healthMsg = &f, "failed: "+strings.Join(firstN(failed, 5), "; ")
		s.fail(gitopsv1alpha1.HealthCheckFailedReason, false, "revision %s: %s", s.revision, s.healthMsg)
		return ctrl.Result{RequeueAfter: s.retryAfter()}, nil
	case len(pending) > 0:
		if s.st.waitRevision != s.revision {
			s.st.waitRevision, s.st.waitSince = s.revision, s.now
		}
		s.healthy, s.healthMsg = &f, "waiting for "+strings.Join(firstN(pending, 5), "; ")
		if s.now.Sub(s.st.waitSince) > s.timeout() {
			s.fail(gitopsv1alpha1.HealthCheckFailedReason, false, "revision %s: timed out after %s %s", s.revision, s.timeout(), s.healthMsg)
			return ctrl.Result{RequeueAfter: s.retryAfter()}, nil
		}
		s.waiting = true
		return ctrl.Result{RequeueAfter: healthPoll}, nil
	}
	s.st.waitRevision = ""
	s.healthy, s.healthMsg = &t, fmt.Sprintf("%d objects healthy", len(objs))
	return ctrl.Result{}, nil
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// health decides one object's health as kstatus (the library Flux and kpt
// use) reads it: Failed (Stalled=True, or a built-in kind's failure: a
// failed Job or Pod, a Deployment past its progress deadline) is failed at
// once, with the child's reason and message; InProgress, Unknown and
// Terminating wait; Current is healthy. A custom CEL check of the kind
// comes on top: its failed expression fails too, and its current
// expression, not kstatus, says when the object is healthy.
func health(u *unstructured.Unstructured, checks map[schema.GroupVersionKind]healthChecker) (healthy, failed bool, msg string) {
	res, err := kstatus.Compute(u)
	if err != nil {
		return false, false, "reading its status: " + err.Error()
	}
	if res.Status == kstatus.FailedStatus {
		return false, true, failedMessage(res)
	}
	if hc, ok := checks[u.GroupVersionKind()]; ok {
		if hc.failed != nil {
			if bad, err := hc.failed.Eval(u.Object); err == nil && bad {
				return false, true, "failed: " + hc.failed.String()
			}
		}
		ok, err := hc.current.Eval(u.Object)
		if err != nil {
			return false, false, err.Error()
		}
		if !ok {
			return false, false, "not yet: " + hc.current.String()
		}
		return true, false, ""
	}
	if res.Status == kstatus.CurrentStatus {
		if waitingForAddress(u) {
			return false, false, "waiting for a load-balancer address"
		}
		return true, false, ""
	}
	return false, false, string(res.Status) + ": " + res.Message
}

// failedMessage is kstatus's Failed result as a person reads it: the
// reason of the Stalled condition (when the object has one) and the
// message.
func failedMessage(res *kstatus.Result) string {
	for _, c := range res.Conditions {
		if c.Type == kstatus.ConditionStalled && c.Reason != "" {
			return "Failed (" + c.Reason + "): " + res.Message
		}
	}
	return "Failed: " + res.Message
}

// waitingForAddress: a LoadBalancer Service without an ingress address.
// kstatus reads it Current once it has a cluster IP; a Sync waits until
// it is reachable (with Converge's load balancer: until an agent announces
// the address and reaches an endpoint through it).
func waitingForAddress(u *unstructured.Unstructured) bool {
	if u.GroupVersionKind().GroupKind().String() != "Service" {
		return false
	}
	if t, _, _ := unstructured.NestedString(u.Object, "spec", "type"); t != "LoadBalancer" {
		return false
	}
	ing, _, _ := unstructured.NestedSlice(u.Object, "status", "loadBalancer", "ingress")
	return len(ing) == 0
}
