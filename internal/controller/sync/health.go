package sync

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// health decides one object's health: a custom CEL check for its kind, else
// built-in rules for common kinds, else its Ready condition if it has one.
func health(u *unstructured.Unstructured, checks map[schema.GroupVersionKind]healthChecker) (healthy, failed bool, msg string) {
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
	obj := u.Object
	i64 := func(path ...string) int64 { v, _, _ := unstructured.NestedInt64(obj, path...); return v }
	if og, found, _ := unstructured.NestedInt64(obj, "status", "observedGeneration"); found && og < u.GetGeneration() {
		return false, false, "the controller has not observed the latest generation"
	}
	cond := func(t string) string {
		conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == t {
				s, _ := m["status"].(string)
				return s
			}
		}
		return ""
	}
	switch u.GroupVersionKind().GroupKind().String() {
	case "Deployment.apps":
		want, found, _ := unstructured.NestedInt64(obj, "spec", "replicas")
		if !found {
			want = 1
		}
		if i64("status", "updatedReplicas") < want || i64("status", "availableReplicas") < want {
			return false, false, fmt.Sprintf("%d/%d replicas updated and available", min(i64("status", "updatedReplicas"), i64("status", "availableReplicas")), want)
		}
	case "StatefulSet.apps":
		want, found, _ := unstructured.NestedInt64(obj, "spec", "replicas")
		if !found {
			want = 1
		}
		if i64("status", "readyReplicas") < want {
			return false, false, fmt.Sprintf("%d/%d replicas ready", i64("status", "readyReplicas"), want)
		}
	case "DaemonSet.apps":
		want := i64("status", "desiredNumberScheduled")
		if i64("status", "numberReady") < want || i64("status", "updatedNumberScheduled") < want {
			return false, false, fmt.Sprintf("%d/%d pods ready", i64("status", "numberReady"), want)
		}
	case "Job.batch":
		if cond("Failed") == "True" {
			return false, true, "the Job failed"
		}
		if cond("Complete") != "True" {
			return false, false, "the Job has not completed"
		}
	case "Pod":
		phase, _, _ := unstructured.NestedString(obj, "status", "phase")
		if phase == "Failed" {
			return false, true, "the Pod failed"
		}
		if phase != "Succeeded" && cond("Ready") != "True" {
			return false, false, "the Pod is not Ready"
		}
	case "Service":
		// kstatus's rule: a LoadBalancer Service is in progress until it
		// has an address.
		if t, _, _ := unstructured.NestedString(obj, "spec", "type"); t == "LoadBalancer" {
			if ing, _, _ := unstructured.NestedSlice(obj, "status", "loadBalancer", "ingress"); len(ing) == 0 {
				return false, false, "waiting for a load-balancer address"
			}
		}
	case "PersistentVolumeClaim":
		if phase, _, _ := unstructured.NestedString(obj, "status", "phase"); phase != "Bound" {
			return false, false, "the claim is not Bound"
		}
	case "CustomResourceDefinition.apiextensions.k8s.io":
		if cond("Established") != "True" {
			return false, false, "not established"
		}
	default:
		if st := cond("Ready"); st != "" && st != "True" {
			return false, false, "Ready is " + st
		}
	}
	return true, false, ""
}
