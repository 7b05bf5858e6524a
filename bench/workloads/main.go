// Command workloads compares the BasicDeployment/BasicReplicaSet pair with
// the real apps/v1 Deployment/ReplicaSet controllers of
// kube-controller-manager, on one local control plane (kwok node, real
// scheduler), one after the other:
//
//   - 0 -> N ready Pods: from creating the object to every Pod available;
//   - a rolling update of N Pods (new image, default 25% surge and
//     unavailability): from the update to the rollout being complete;
//   - the API requests each issued, read from kube-apiserver's
//     apiserver_request_total before and after each phase.
//
// Both sides are given the same client-side budget explicitly (-qps,
// -burst; 20 and 30 by default, kube-controller-manager's defaults): kube-
// controller-manager through --kube-api-qps/--kube-api-burst, which give
// each of its controllers its own bucket, and Converge's basicdeployment and
// basicreplicaset controllers through their per-controller budgets, so the
// comparison never depends on either side's defaults. Both run 5 concurrent
// syncs. It prints figures and asserts nothing. From the
// repository root (after `make tools`):
//
//	go run ./bench/workloads -replicas 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
	"github.com/converge-dev/converge/bench/internal/apicount"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/internal/controller/basicdeployment"
	"github.com/converge-dev/converge/internal/controller/basicreplicaset"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
)

// qps and burst are the budget both sides get.
var (
	qps   float64
	burst int
)

func main() {
	replicas := flag.Int("replicas", 1000, "Pods per workload")
	runs := flag.Int("runs", 1, "runs of each side, interleaved")
	timeout := flag.Duration("timeout", 15*time.Minute, "give up on one phase after this long")
	flag.Float64Var(&qps, "qps", 20, "client-side QPS of each workload controller, on both sides")
	flag.IntVar(&burst, "burst", 30, "client-side burst of each workload controller, on both sides")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, int32(*replicas), *runs, *timeout) //nolint:gosec // a flag
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "workloads:", err)
		os.Exit(1)
	}
}

// side is one implementation of the workload pair.
type side struct {
	name     string
	short    string   // for namespace names
	resource []string // the resources its controllers own, besides Pods and Events
	create   func(ctx context.Context, c client.Client, ns string, n int32) (client.Object, error)
	update   func(ctx context.Context, c client.Client, obj client.Object) error
	done     func(ctx context.Context, c client.Client, obj client.Object) (bool, error)

	up, roll       []time.Duration
	upReq, rollReq []requests
}

func run(ctx context.Context, n int32, runs int, timeout time.Duration) error {
	fmt.Fprintln(os.Stderr, "starting the local control plane (kube-controller-manager, scheduler, 1 kwok node) ...")
	fmt.Fprintf(os.Stderr, "budget of every workload controller on both sides: %v QPS, burst %d\n", qps, burst)
	env, err := testenv.Start(ctx, testenv.Options{ControllerManager: true, Scheduler: true, Nodes: 1,
		ControllerManagerArgs: []string{fmt.Sprintf("--kube-api-qps=%v", qps), fmt.Sprintf("--kube-api-burst=%d", burst)},
		Manager: func(o *setup.Options) {
			o.KubeAPIQPS = map[string]float32{basicdeployment.ControllerName: float32(qps), basicreplicaset.ControllerName: float32(qps)}
			o.KubeAPIBurst = map[string]int{basicdeployment.ControllerName: burst, basicreplicaset.ControllerName: burst}
		}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()

	sides := []*side{converge(), kcm()}
	for r := range runs {
		for _, s := range sides {
			ns := fmt.Sprintf("bench-%s-%d", s.short, r)
			if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				return err
			}
			// Let the namespace's service account and the caches settle.
			time.Sleep(2 * time.Second)

			before, err := scrape(ctx, env)
			if err != nil {
				return err
			}
			start := time.Now()
			obj, err := s.create(ctx, env.Client, ns, n)
			if err != nil {
				return err
			}
			if err := waitDone(ctx, env.Client, s, obj, timeout); err != nil {
				return fmt.Errorf("%s: 0 -> %d: %w", s.name, n, err)
			}
			up := time.Since(start)
			time.Sleep(time.Second) // let trailing status writes land in this phase
			mid, err := scrape(ctx, env)
			if err != nil {
				return err
			}
			start = time.Now()
			if err := s.update(ctx, env.Client, obj); err != nil {
				return err
			}
			if err := waitDone(ctx, env.Client, s, obj, timeout); err != nil {
				return fmt.Errorf("%s: rolling update: %w", s.name, err)
			}
			roll := time.Since(start)
			time.Sleep(time.Second)
			after, err := scrape(ctx, env)
			if err != nil {
				return err
			}
			s.up, s.roll = append(s.up, up), append(s.roll, roll)
			s.upReq = append(s.upReq, of(mid.Minus(before), s.resource))
			s.rollReq = append(s.rollReq, of(after.Minus(mid), s.resource))
			fmt.Fprintf(os.Stderr, "%s run %d: 0 -> %d in %s, rolling update in %s\n", s.name, r+1, n, up.Round(time.Millisecond), roll.Round(time.Millisecond))

			// Clean up before the other side runs (not timed).
			if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				return err
			}
			if err := waitGone(ctx, env.Client, ns, timeout); err != nil {
				return err
			}
		}
	}
	report(os.Stdout, n, sides)
	return nil
}

func waitDone(ctx context.Context, c client.Client, s *side, obj client.Object, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return s.done(ctx, c, obj)
	})
}

// waitGone waits until the namespace is gone, so that the namespace
// controller's deletions are not counted in the next side's figures.
func waitGone(ctx context.Context, c client.Client, ns string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

func template(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1"}}},
	}
}

func converge() *side {
	return &side{
		name:     "Converge BasicDeployment",
		short:    "converge",
		resource: []string{"basicdeployments", "basicreplicasets"},
		create: func(ctx context.Context, c client.Client, ns string, n int32) (client.Object, error) {
			d := &workloadsv1alpha1.BasicDeployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench"},
				Spec: workloadsv1alpha1.BasicDeploymentSpec{
					Replicas: ptr.To(n),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bench"}},
					Template: template("bench"),
				},
			}
			return d, c.Create(ctx, d)
		},
		update: func(ctx context.Context, c client.Client, obj client.Object) error {
			d := obj.(*workloadsv1alpha1.BasicDeployment)
			base := d.DeepCopy()
			d.Spec.Template.Spec.Containers[0].Image = "nginx:2"
			return c.Patch(ctx, d, client.MergeFrom(base))
		},
		done: func(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
			d := obj.(*workloadsv1alpha1.BasicDeployment)
			if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
				return false, err
			}
			n, st := *d.Spec.Replicas, d.Status
			return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == n && st.Replicas == n && st.AvailableReplicas == n, nil
		},
	}
}

func kcm() *side {
	return &side{
		name:     "apps/v1 Deployment",
		short:    "apps",
		resource: []string{"deployments", "replicasets"},
		create: func(ctx context.Context, c client.Client, ns string, n int32) (client.Object, error) {
			d := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench"},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To(n),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bench"}},
					Template: template("bench"),
				},
			}
			return d, c.Create(ctx, d)
		},
		update: func(ctx context.Context, c client.Client, obj client.Object) error {
			d := obj.(*appsv1.Deployment)
			base := d.DeepCopy()
			d.Spec.Template.Spec.Containers[0].Image = "nginx:2"
			return c.Patch(ctx, d, client.MergeFrom(base))
		},
		done: func(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
			d := obj.(*appsv1.Deployment)
			if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
				return false, err
			}
			n, st := *d.Spec.Replicas, d.Status
			return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == n && st.Replicas == n && st.AvailableReplicas == n, nil
		},
	}
}

// counts are apiserver_request_total by "verb resource[/subresource]".
type counts = apicount.Counts

func scrape(ctx context.Context, env *testenv.Environment) (counts, error) {
	return apicount.Scrape(ctx, env.Clientset)
}

// requests are the API requests attributable to one side's controllers:
// every verb but GET on its own resources and on events, and the writes to Pods
// themselves (create, delete, update, patch; not pods/status or
// pods/binding, which kwok and the scheduler issue for both sides alike).
type requests struct {
	total float64
	by    map[string]float64
}

func of(c counts, resources []string) requests {
	r := requests{by: map[string]float64{}}
	own := map[string]bool{"events": true}
	for _, res := range resources {
		own[res] = true
	}
	for k, v := range c {
		verb, res, _ := strings.Cut(k, " ")
		name, sub, _ := strings.Cut(res, "/")
		switch {
		case verb == "GET":
			// The benchmark's own polling; controllers read from caches.
			continue
		case own[name]:
		case name == "pods" && sub == "" && (verb == "POST" || verb == "DELETE" || verb == "PUT" || verb == "PATCH"):
		default:
			continue
		}
		r.total += v
		r.by[k] += v
	}
	return r
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func medianReq(rs []requests) requests {
	s := append([]requests(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return s[i].total < s[j].total })
	return s[len(s)/2]
}

func report(w io.Writer, n int32, sides []*side) {
	c, k := sides[0], sides[1]
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "median of %d run(s)\t%s\t%s\tratio\t\n", len(c.up), c.name, k.name)
	row := func(label string, a, b time.Duration) {
		fmt.Fprintf(tw, "%s\t%.2fs\t%.2fs\t%.2f\t\n", label, a.Seconds(), b.Seconds(), a.Seconds()/b.Seconds())
	}
	row(fmt.Sprintf("0 -> %d ready Pods", n), median(c.up), median(k.up))
	row(fmt.Sprintf("rolling update of %d Pods", n), median(c.roll), median(k.roll))
	reqRow := func(label string, a, b requests) {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t\n", label, a.total, b.total, a.total/b.total)
	}
	cu, ku, cr, kr := medianReq(c.upReq), medianReq(k.upReq), medianReq(c.rollReq), medianReq(k.rollReq)
	reqRow("API requests, 0 -> ready", cu, ku)
	reqRow("API requests, rolling update", cr, kr)
	_ = tw.Flush()
	benchout.Ratio(fmt.Sprintf("workloads.up_%d_pods_vs_kcm", n), median(c.up).Seconds(), "s", median(c.up).Seconds()/median(k.up).Seconds())
	benchout.Ratio(fmt.Sprintf("workloads.rollout_%d_pods_vs_kcm", n), median(c.roll).Seconds(), "s", median(c.roll).Seconds()/median(k.roll).Seconds())
	benchout.Ratio("workloads.requests_up_vs_kcm", cu.total, "requests", cu.total/ku.total)
	benchout.Ratio("workloads.requests_rollout_vs_kcm", cr.total, "requests", cr.total/kr.total)
	fmt.Fprintln(w, "\nAPI requests by verb and resource (median run):")
	for _, p := range []struct {
		label string
		r     requests
	}{{c.name + ", 0 -> ready", cu}, {k.name + ", 0 -> ready", ku}, {c.name + ", rolling update", cr}, {k.name + ", rolling update", kr}} {
		keys := make([]string, 0, len(p.r.by))
		for key := range p.r.by {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, key := range keys {
			parts = append(parts, fmt.Sprintf("%s=%.0f", key, p.r.by[key]))
		}
		fmt.Fprintf(w, "  %s: %s\n", p.label, strings.Join(parts, ", "))
	}
}
