package basicdeployment

import (
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

// Arithmetic over BasicReplicaSets, kept free of API calls so that it is
// table-tested.

func replicas(d *workloadsv1alpha1.BasicDeployment) int32 { return ptr.Deref(d.Spec.Replicas, 1) }

func specReplicas(rs *workloadsv1alpha1.BasicReplicaSet) int32 { return ptr.Deref(rs.Spec.Replicas, 1) }

// podBound is an upper bound on the Pods rs has (not being deleted): the
// larger of what it is asked for and what it last reported, so a child that
// has not yet acted on a scale-down still counts its Pods. kube-controller-
// manager counts spec.replicas alone and can briefly exceed maxSurge when
// the ReplicaSet controller lags; this does not.
func podBound(rs *workloadsv1alpha1.BasicReplicaSet) int32 {
	return max(specReplicas(rs), rs.Status.Replicas)
}

// availableBound is a lower bound on the available Pods rs keeps: what it
// last reported, but no more than it is asked for, since Pods above
// spec.replicas are about to go.
func availableBound(rs *workloadsv1alpha1.BasicReplicaSet) int32 {
	return min(rs.Status.AvailableReplicas, specReplicas(rs))
}

func sum(rss []*workloadsv1alpha1.BasicReplicaSet, f func(*workloadsv1alpha1.BasicReplicaSet) int32) int32 {
	var n int32
	for _, rs := range rss {
		n += f(rs)
	}
	return n
}

func isRolling(d *workloadsv1alpha1.BasicDeployment) bool {
	return d.Spec.Strategy.Type != workloadsv1alpha1.RecreateStrategyType
}

// fenceposts resolves maxSurge (rounded up) and maxUnavailable (rounded
// down) against replicas; both zero would never progress, so unavailable
// becomes 1, as in kube-controller-manager.
func fenceposts(d *workloadsv1alpha1.BasicDeployment) (surge, unavailable int32) {
	if !isRolling(d) {
		return 0, 0
	}
	ms, mu := intstr.FromString("25%"), intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			ms = *ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			mu = *ru.MaxUnavailable
		}
	}
	want := int(replicas(d))
	s, err := intstr.GetScaledValueFromIntOrPercent(&ms, want, true)
	if err != nil || s < 0 {
		s = 0
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(&mu, want, false)
	if err != nil || u < 0 {
		u = 0
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u)
}

func maxSurge(d *workloadsv1alpha1.BasicDeployment) int32 {
	s, _ := fenceposts(d)
	return s
}

func maxUnavailable(d *workloadsv1alpha1.BasicDeployment) int32 {
	if !isRolling(d) || replicas(d) == 0 {
		return 0
	}
	_, u := fenceposts(d)
	return min(u, replicas(d))
}

// newRSReplicas is how large the new BasicReplicaSet may be now: for
// Recreate, replicas; for RollingUpdate, as large as maxSurge allows given
// every child's Pods, and no larger than replicas.
func newRSReplicas(d *workloadsv1alpha1.BasicDeployment, all []*workloadsv1alpha1.BasicReplicaSet, newRS *workloadsv1alpha1.BasicReplicaSet) int32 {
	if !isRolling(d) {
		return replicas(d)
	}
	var cur int32
	if newRS != nil {
		cur = specReplicas(newRS)
	}
	maxTotal := replicas(d) + maxSurge(d)
	pods := sum(all, podBound)
	if pods >= maxTotal {
		return cur
	}
	return cur + max(0, min(maxTotal-pods, replicas(d)-cur))
}

func revision(rs *workloadsv1alpha1.BasicReplicaSet) int64 {
	n, err := strconv.ParseInt(rs.Annotations[workloadsv1alpha1.RevisionAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func maxRevision(rss []*workloadsv1alpha1.BasicReplicaSet) int64 {
	var n int64
	for _, rs := range rss {
		n = max(n, revision(rs))
	}
	return n
}

// byAge sorts oldest first: by revision, then creation, then name.
func byAge(rss []*workloadsv1alpha1.BasicReplicaSet) []*workloadsv1alpha1.BasicReplicaSet {
	out := append([]*workloadsv1alpha1.BasicReplicaSet(nil), rss...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if ra, rb := revision(a), revision(b); ra != rb {
			return ra < rb
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return out
}

// proportions spreads toAdd (negative to remove) over active children in
// proportion to their size, largest first (newest first on ties when
// adding), and gives the rounding leftover to the first; no child goes
// below zero. It returns the new sizes by index of active.
func proportions(active []*workloadsv1alpha1.BasicReplicaSet, toAdd int32) []int32 {
	sizes := make([]int32, len(active))
	order := make([]int, len(active))
	for i, rs := range active {
		sizes[i] = specReplicas(rs)
		order[i] = i
	}
	total := sum(active, specReplicas)
	if total == 0 || toAdd == 0 {
		return sizes
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, b := active[order[x]], active[order[y]]
		if specReplicas(a) != specReplicas(b) {
			return specReplicas(a) > specReplicas(b)
		}
		if toAdd > 0 {
			return revision(a) > revision(b)
		}
		return revision(a) < revision(b)
	})
	var added int32
	for _, i := range order {
		p := int32(int64(sizes[i]) * int64(toAdd) / int64(total)) //nolint:gosec // |p| <= |toAdd|, an int32
		if toAdd < 0 {
			p = max(p, -sizes[i])
		}
		sizes[i] += p
		added += p
	}
	// The leftover from rounding goes to the largest children first.
	for _, i := range order {
		left := toAdd - added
		if left == 0 {
			break
		}
		if left > 0 {
			sizes[i] += left
			break
		}
		take := max(left, -sizes[i])
		sizes[i] += take
		added += take
	}
	return sizes
}
