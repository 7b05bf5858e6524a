package localcp

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
)

// kwokNodeAnnotation marks the nodes kwok manages.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// NodeName returns the name of the i-th fake node.
func NodeName(i int) string { return fmt.Sprintf("kwok-node-%d", i) }

// ensureNodes creates (or leaves alone) the fake nodes. kwok then reports
// them Ready and runs the lifecycle of the Pods bound to them.
func (cp *ControlPlane) ensureNodes(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.rest)
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	for i := range cp.cfg.Nodes {
		name := NodeName(i)
		node := corev1ac.Node(name).
			WithAnnotations(map[string]string{kwokNodeAnnotation: "fake"}).
			WithLabels(map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			})
		if _, err := cs.CoreV1().Nodes().Apply(ctx, node, metav1.ApplyOptions{FieldManager: "converge-localcp", Force: true}); err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
	}
	return nil
}

// releaseNodeLeases deletes the Leases of our fake nodes. They are held under
// the identity of the kwok that ran before (it dies with us); a new kwok
// cannot take them over until they expire, and manages no Pod until then.
func (cp *ControlPlane) releaseNodeLeases(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.rest)
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	for i := range cp.cfg.Nodes {
		err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, NodeName(i), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("releasing lease of node %s: %w", NodeName(i), err)
		}
	}
	return nil
}

// WaitNodesReady waits until every fake node is Ready and schedulable (the
// node-lifecycle controller has lifted the not-ready taint).
func (cp *ControlPlane) WaitNodesReady(ctx context.Context) error {
	if cp.cfg.Nodes == 0 {
		return nil
	}
	cs, err := kubernetes.NewForConfig(cp.rest)
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	for {
		ready := 0
		for i := range cp.cfg.Nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, NodeName(i), metav1.GetOptions{})
			if err == nil && nodeSchedulable(n, cp.cfg.ControllerManager) {
				ready++
			}
		}
		if ready == cp.cfg.Nodes {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d node(s) to become Ready (%d are): %w", cp.cfg.Nodes, ready, ctx.Err())
		case err := <-cp.failed:
			cp.failed <- err
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func nodeSchedulable(n *corev1.Node, taintLifted bool) bool {
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return false
	}
	if !taintLifted {
		return true
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	return true
}
