// Command why measures `converge why` and `converge tree` on an object whose
// graph has -nodes nodes (a Sync whose inventory lists -nodes-1
// BasicDeployments) in a cluster of -objects Converge objects (the rest are
// unrelated BasicDeployments in other namespaces), against a floor measured
// in the same run: one GET of the Sync and one LIST of the BasicDeployments
// of its namespace, the least a client must read to see the graph. It counts
// the reads each answer made from kube-apiserver's apiserver_request_total
// (bounded by the graph, not the cluster) and measures the live page's
// (`converge ui`) update latency: from a status change of one object of the
// graph to the page's new rendering on its event stream. No controller runs:
// the statuses are the ones the benchmark writes. It prints BENCH lines and
// asserts nothing. From the repository root (after `make tools`):
//
//	go run ./bench/why -nodes 1000 -objects 10000
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/bench/internal/apicount"
	"github.com/converge-dev/converge/bench/internal/benchout"
	"github.com/converge-dev/converge/bench/internal/par"
	"github.com/converge-dev/converge/internal/graph"
	"github.com/converge-dev/converge/internal/setup"
	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/internal/ui"
	"github.com/converge-dev/converge/internal/whycli"
)

func main() {
	nodes := flag.Int("nodes", 300, "nodes of the graph: a Sync and the BasicDeployments of its inventory")
	objects := flag.Int("objects", 3000, "Converge objects in the cluster (the graph's and unrelated BasicDeployments in other namespaces)")
	runs := flag.Int("runs", 3, "answers timed per verb (the median is printed)")
	qps := flag.Float64("qps", 5, "client-side QPS of why and tree (client-go's default, as the verbs run)")
	burst := flag.Int("burst", 10, "client-side burst, as -qps")
	updates := flag.Int("updates", 5, "status changes timed on the live page (the median is printed)")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *nodes, *objects, *runs, float32(*qps), *burst, *updates)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "why:", err)
		os.Exit(1)
	}
}

const ns = "graph"

var (
	bdGVK   = schema.GroupVersionKind{Group: "workloads.converge.dev", Version: "v1alpha1", Kind: "BasicDeployment"}
	syncGVK = schema.GroupVersionKind{Group: "gitops.converge.dev", Version: "v1alpha1", Kind: "Sync"}
)

func basicDeployment(namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx:1.27"}}},
			},
		},
	}}
	u.SetGroupVersionKind(bdGVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// populate writes the benchmark's cluster: a Sync whose inventory lists
// nodes-1 BasicDeployments of its namespace, and objects-nodes unrelated
// BasicDeployments in other namespaces.
func populate(ctx context.Context, wc client.Client, nodes, objects int) error {
	noise := (objects - nodes + 999) / 1000
	for _, n := range append([]string{ns}, noiseNamespaces(noise)...) {
		if err := wc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			return err
		}
	}
	t0 := time.Now()
	inv := make([]any, 0, nodes-1)
	for i := range nodes - 1 {
		inv = append(inv, map[string]any{"group": bdGVK.Group, "version": bdGVK.Version, "kind": bdGVK.Kind, "namespace": ns, "name": fmt.Sprintf("bd-%d", i)})
	}
	if err := par.Do(16, nodes-1, func(i int) error { return wc.Create(ctx, basicDeployment(ns, fmt.Sprintf("bd-%d", i))) }); err != nil {
		return fmt.Errorf("creating the graph's BasicDeployments: %w", err)
	}
	unrelated := objects - nodes
	if err := par.Do(16, unrelated, func(i int) error {
		return wc.Create(ctx, basicDeployment(fmt.Sprintf("noise-%d", i/1000), fmt.Sprintf("bd-%d", i)))
	}); err != nil {
		return fmt.Errorf("creating the unrelated BasicDeployments: %w", err)
	}
	s := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"sourceRef": map[string]any{"name": "repo"}, "prune": false, "serviceAccountName": "deployer"}}}
	s.SetGroupVersionKind(syncGVK)
	s.SetNamespace(ns)
	s.SetName("app")
	if err := wc.Create(ctx, s); err != nil {
		return fmt.Errorf("creating the Sync: %w", err)
	}
	// The inventory a Sync controller would write.
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"inventory": inv}})
	if err := wc.Status().Patch(ctx, s, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("writing the Sync's inventory: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%d objects written in %s\n", objects, time.Since(t0).Round(time.Millisecond))
	return nil
}

// measureFloor is the floor of an answer: one GET of the Sync and one LIST
// of the BasicDeployments of its namespace, with the verbs' budget; the
// median of runs.
func measureFloor(ctx context.Context, newClient func() (client.Client, error), runs int) (time.Duration, error) {
	var floors []time.Duration
	for range runs {
		c, err := newClient()
		if err != nil {
			return 0, err
		}
		start := time.Now()
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(syncGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, got); err != nil {
			return 0, err
		}
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(bdGVK.GroupVersion().WithKind("BasicDeploymentList"))
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		floors = append(floors, time.Since(start))
	}
	return median(floors), nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func run(ctx context.Context, nodes, objects, runs int, qps float32, burst, updates int) error {
	if nodes < 2 || objects < nodes {
		return fmt.Errorf("want -nodes >= 2 and -objects >= -nodes")
	}
	fmt.Fprintf(os.Stderr, "starting the local control plane; a graph of %d nodes among %d Converge objects\n", nodes, objects)
	env, err := testenv.Start(ctx, testenv.Options{NoManager: true})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	// The objects are written with a large budget (setup, not measured).
	wcfg := rest.CopyConfig(env.Config)
	wcfg.QPS, wcfg.Burst = 1000, 2000
	wc, err := client.New(wcfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return err
	}
	if err := populate(ctx, wc, nodes, objects); err != nil {
		return err
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = qps, burst
	newClient := func() (client.Client, error) { return client.New(cfg, client.Options{Scheme: setup.Scheme()}) }

	floor, err := measureFloor(ctx, newClient, runs)
	if err != nil {
		return err
	}

	type verb struct {
		name string
		f    func(context.Context, client.Client, io.Writer) error
	}
	for _, v := range []verb{
		{"why", func(ctx context.Context, c client.Client, w io.Writer) error {
			return whycli.Why(ctx, c, w, ns, "sync/app", whycli.Options{})
		}},
		{"tree", func(ctx context.Context, c client.Client, w io.Writer) error {
			return whycli.Tree(ctx, c, w, ns, "sync/app", whycli.Options{})
		}},
	} {
		// One answer first, untimed: the API server's first LISTs of
		// these kinds are not the verb's cost.
		if c, err := newClient(); err != nil {
			return err
		} else if err := v.f(ctx, c, io.Discard); err != nil && !errors.Is(err, graph.ErrNotCurrent) {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		var times []time.Duration
		var reads apicount.Counts
		lines := 0
		for range runs {
			c, err := newClient()
			if err != nil {
				return err
			}
			before, err := apicount.Scrape(ctx, env.Clientset)
			if err != nil {
				return err
			}
			var out strings.Builder
			start := time.Now()
			err = v.f(ctx, c, &out)
			times = append(times, time.Since(start))
			if err != nil && !errors.Is(err, graph.ErrNotCurrent) {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			after, err := apicount.Scrape(ctx, env.Clientset)
			if err != nil {
				return err
			}
			reads = after.Minus(before).Reads("syncs", "gitrepositories", "basicdeployments", "basicreplicasets", "events")
			lines = strings.Count(out.String(), "\n")
		}
		d := median(times)
		fmt.Printf("%-5s sync/app (%d nodes, %d objects in the cluster): %s (floor %s, x%.2f), %d lines, reads: %s\n",
			v.name, nodes, objects, d.Round(time.Millisecond), floor.Round(time.Millisecond), float64(d)/float64(floor), lines, reads)
		benchout.Ratio("why."+v.name, d.Seconds(), "s", float64(d)/float64(floor))
		benchout.Line("why."+v.name+"-reads", reads.Total(), "requests")
	}

	// The live page: a status change of one BasicDeployment of the graph,
	// to the page's new rendering on its event stream.
	lat, err := pageLatency(ctx, env.Config, wc, updates)
	if err != nil {
		return fmt.Errorf("the live page: %w", err)
	}
	fmt.Printf("page update after a status change: median %s of %d\n", lat.Round(time.Millisecond), updates)
	benchout.Line("why.page-update", lat.Seconds(), "s")
	return nil
}

func noiseNamespaces(n int) []string {
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, fmt.Sprintf("noise-%d", i))
	}
	return out
}

// pageLatency serves the page for sync/app, reads its event stream and, n
// times, writes a new Ready reason on bd-0's status and waits for the
// rendering that shows it.
func pageLatency(ctx context.Context, cfg *rest.Config, wc client.Client, n int) (time.Duration, error) {
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return 0, err
	}
	srv, err := ui.New(ui.Options{Config: cfg, Client: c, Namespace: ns, Target: "sync/app"})
	if err != nil {
		return 0, err
	}
	ln, url, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "serving the page:", err)
		}
	}()

	req, err := http.NewRequestWithContext(sctx, http.MethodGet, strings.Replace(url, "/?token=", "/events?token=", 1), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	renderings := make(chan string, 16)
	go func() {
		defer close(renderings)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		var b strings.Builder
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "data: "):
				b.WriteString(l[len("data: "):])
				b.WriteByte('\n')
			case l == "" && b.Len() > 0:
				renderings <- b.String()
				b.Reset()
			}
		}
	}()
	// The first rendering: the graph as it is.
	select {
	case <-renderings:
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("no first rendering")
	}
	var lat []time.Duration
	for i := range n {
		reason := fmt.Sprintf("BenchReason%d", i)
		bd := basicDeployment(ns, "bd-0")
		now := metav1.Now().UTC().Format(time.RFC3339)
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
			"type": "Ready", "status": "False", "reason": reason, "message": "written by bench/why", "lastTransitionTime": now}}}})
		start := time.Now()
		if err := wc.Status().Patch(ctx, bd, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			return 0, err
		}
		for seen := false; !seen; {
			select {
			case r, ok := <-renderings:
				if !ok {
					return 0, fmt.Errorf("the event stream ended")
				}
				seen = strings.Contains(r, reason)
			case <-time.After(time.Minute):
				return 0, fmt.Errorf("no rendering showed %s", reason)
			}
		}
		lat = append(lat, time.Since(start))
	}
	return median(lat), nil
}
