package kitchen_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/converge-dev/converge/examples/kitchen"
	kitchenv1alpha1 "github.com/converge-dev/converge/examples/kitchen/api/v1alpha1"
	"github.com/converge-dev/converge/pkg/testcluster"
)

var cluster *testcluster.Cluster

// The suite runs on a real control plane (Converge's public test harness,
// pkg/testcluster) with kube-controller-manager, whose garbage collector
// deletes an Order's Meals; the kitchen's CRDs and its webhook are installed
// before it starts. Each test runs the kitchen's own manager, as cmd/kitchen
// does.
func TestMain(m *testing.M) {
	os.Exit(testcluster.Main(m, testcluster.Options{
		ControllerManager: true,
		CRDDirectoryPaths: []string{filepath.Join("config", "crd")},
		WebhookManifests:  []string{filepath.Join("config", "webhook", "manifests.yaml")},
	}, &cluster))
}

// An Order with sets: 3 gets three Meals it controls and is processed and
// Ready; scaled to 1, the extra Meals go; a new chef reaches the Meal left;
// deleted, its Meals are collected.
func TestOrderCooksItsMeals(t *testing.T) {
	testcluster.Need(t, cluster)
	c := startKitchen(t, true)
	ns := cluster.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()

	o := &kitchenv1alpha1.Order{
		ObjectMeta: metav1.ObjectMeta{Name: "dinner", Namespace: ns},
		Spec: kitchenv1alpha1.OrderSpec{
			MealConfig: kitchenv1alpha1.MealConfig{Main: "ramen", Sides: []string{"gyoza"}},
			Sets:       3,
			Chef:       "ana",
		},
	}
	g.Expect(c.Create(ctx, o)).To(Succeed())

	served := func(sets int32, chef string) {
		t.Helper()
		eventually(g, func(g Gomega) {
			got := &kitchenv1alpha1.Order{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), got)).To(Succeed())
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.Processed).To(BeTrue())
			g.Expect(got.Status.Meals).To(Equal(sets))
			hasCondition(g, got.Status.Conditions, metav1.ConditionTrue, kitchenv1alpha1.ServedReason)
			res, err := testcluster.Kstatus(ctx, c, got)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Status).To(Equal(kstatus.CurrentStatus), res.Message)

			meals := mealsOf(ctx, g, c, o)
			g.Expect(meals).To(HaveLen(int(sets)))
			for i := range meals {
				m := &meals[i]
				g.Expect(m.Spec.Set).To(Equal(int32(i)))
				g.Expect(m.Spec.Chef).To(Equal(chef))
				g.Expect(m.Spec.MealConfig).To(Equal(o.Spec.MealConfig))
				g.Expect(metav1.IsControlledBy(m, got)).To(BeTrue(), "Meal %s is controlled by the Order", m.Name)
				g.Expect(m.OwnerReferences[0].BlockOwnerDeletion).To(Equal(ptr.To(true)))
				hasCondition(g, m.Status.Conditions, metav1.ConditionTrue, kitchenv1alpha1.CookedReason)
				g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
			}
		}).Should(Succeed())
	}
	served(3, "ana")

	// Fewer sets, another chef: the extra Meals are deleted, the one left
	// is cooked again.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
	before := o.DeepCopy()
	o.Spec.Sets, o.Spec.Chef = 1, "bo"
	g.Expect(c.Patch(ctx, o, client.MergeFrom(before))).To(Succeed())
	served(1, "bo")

	// A Meal deleted by hand is cooked again.
	g.Expect(c.Delete(ctx, &kitchenv1alpha1.Meal{ObjectMeta: metav1.ObjectMeta{Name: "dinner-0", Namespace: ns}})).To(Succeed())
	served(1, "bo")

	// The Order deleted, the garbage collector (kube-controller-manager's,
	// not the controller) deletes its Meals. (The harness installed the
	// CRDs before kube-controller-manager started: the collector learns of
	// kinds installed later only on its discovery resync, every 30 s.)
	start := time.Now()
	g.Expect(c.Delete(ctx, o)).To(Succeed())
	eventually(g, func(g Gomega) {
		g.Expect(mealsOf(ctx, g, c, o)).To(BeEmpty())
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(o), &kitchenv1alpha1.Order{}))).To(BeTrue())
	}).WithTimeout(90 * time.Second).Should(Succeed())
	t.Logf("Meals collected %s after the Order's delete", time.Since(start).Round(time.Millisecond))
}

// Without a chef, an Order's Meals are made but not cooked: the Order is
// not Ready ("0 of 2 meals served") and kstatus reads it InProgress; once a
// Meal is cooked (its Ready condition, written here as a chef would), the
// Order counts it, and it is served when both are.
func TestOrderWaitsForItsMeals(t *testing.T) {
	testcluster.Need(t, cluster)
	c := startKitchen(t, false)
	ns := cluster.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()

	o := &kitchenv1alpha1.Order{
		ObjectMeta: metav1.ObjectMeta{Name: "lunch", Namespace: ns},
		Spec:       kitchenv1alpha1.OrderSpec{MealConfig: kitchenv1alpha1.MealConfig{Main: "soup"}, Sets: 2, Chef: "ana"},
	}
	g.Expect(c.Create(ctx, o)).To(Succeed())
	waiting := func(served int32) {
		t.Helper()
		eventually(g, func(g Gomega) {
			got := &kitchenv1alpha1.Order{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), got)).To(Succeed())
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.Meals).To(Equal(served))
			g.Expect(got.Status.Processed).To(BeFalse())
			cond := hasCondition(g, got.Status.Conditions, metav1.ConditionFalse, kitchenv1alpha1.CookingReason)
			g.Expect(cond.Message).To(Equal(fmt.Sprintf("%d of 2 meals served", served)))
			res, err := testcluster.Kstatus(ctx, c, got)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Status).To(Equal(kstatus.InProgressStatus), res.Message)
			g.Expect(mealsOf(ctx, g, c, o)).To(HaveLen(2))
		}).Should(Succeed())
	}
	waiting(0)

	cook := func(name string) {
		t.Helper()
		m := &kitchenv1alpha1.Meal{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
		m.Status.ObservedGeneration = m.Generation
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: kitchenv1alpha1.ReadyCondition, Status: metav1.ConditionTrue,
			Reason: kitchenv1alpha1.CookedReason, Message: "cooked by hand", ObservedGeneration: m.Generation})
		g.Expect(c.Status().Update(ctx, m)).To(Succeed())
	}
	cook("lunch-0")
	waiting(1)
	cook("lunch-1")
	eventually(g, func(g Gomega) {
		got := &kitchenv1alpha1.Order{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), got)).To(Succeed())
		g.Expect(got.Status.Processed).To(BeTrue())
		g.Expect(got.Status.Meals).To(Equal(int32(2)))
		hasCondition(g, got.Status.Conditions, metav1.ConditionTrue, kitchenv1alpha1.ServedReason)
	}).Should(Succeed())
}

// The webhook refuses an Order of fewer than one set, naming the field; the
// schema refuses one without a chef or a main dish.
func TestOrderValidation(t *testing.T) {
	testcluster.Need(t, cluster)
	c := startKitchen(t, true)
	ns := cluster.NewNamespace(t)
	g := NewWithT(t)
	for name, tc := range map[string]struct {
		spec kitchenv1alpha1.OrderSpec
		want string
	}{
		"no-sets":       {kitchenv1alpha1.OrderSpec{MealConfig: kitchenv1alpha1.MealConfig{Main: "soup"}, Chef: "ana"}, "spec.sets: Invalid value: 0: an Order asks for at least one set"},
		"negative-sets": {kitchenv1alpha1.OrderSpec{MealConfig: kitchenv1alpha1.MealConfig{Main: "soup"}, Sets: -1, Chef: "ana"}, "spec.sets: Invalid value: -1: an Order asks for at least one set"},
		"no-chef":       {kitchenv1alpha1.OrderSpec{MealConfig: kitchenv1alpha1.MealConfig{Main: "soup"}, Sets: 1}, "spec.chef"},
		"no-main":       {kitchenv1alpha1.OrderSpec{Sets: 1, Chef: "ana"}, "spec.mealConfig.main"},
	} {
		err := c.Create(t.Context(), &kitchenv1alpha1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: tc.spec})
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
		g.Expect(err.Error()).To(ContainSubstring(tc.want), name)
	}
	// An Order scaled to zero is refused the same way.
	o := &kitchenv1alpha1.Order{ObjectMeta: metav1.ObjectMeta{Name: "ok", Namespace: ns},
		Spec: kitchenv1alpha1.OrderSpec{MealConfig: kitchenv1alpha1.MealConfig{Main: "soup"}, Sets: 1, Chef: "ana"}}
	g.Expect(c.Create(t.Context(), o)).To(Succeed())
	before := o.DeepCopy()
	o.Spec.Sets = 0
	err := c.Patch(t.Context(), o, client.MergeFrom(before))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.sets"))
}

// mealsOf lists o's Meals from the API server, by set.
func mealsOf(ctx context.Context, g Gomega, c client.Client, o *kitchenv1alpha1.Order) []kitchenv1alpha1.Meal {
	var meals kitchenv1alpha1.MealList
	g.Expect(c.List(ctx, &meals, client.InNamespace(o.Namespace), client.MatchingLabels{kitchenv1alpha1.OrderLabel: o.Name})).To(Succeed())
	slices.SortFunc(meals.Items, func(a, b kitchenv1alpha1.Meal) int { return int(a.Spec.Set - b.Spec.Set) })
	return meals.Items
}

// startKitchen runs the Order controller, the webhook and (with chef) the
// Chef in their own manager until the test ends, as cmd/kitchen does. It
// returns a direct client that knows the kitchen types.
func startKitchen(t *testing.T, chef bool) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := kitchenv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cluster.Config, ctrl.Options{
		Scheme:        scheme,
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: cluster.WebhookServer(),
		Controller:    config.Controller{SkipNameValidation: ptr.To(true)}, // one manager per test
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&kitchen.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if chef {
		if err := (&kitchen.Chef{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
	}
	if err := (kitchen.OrderValidator{}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testcluster.RunManager(t, mgr)
	c, err := cluster.NewClient(scheme)
	if err != nil {
		t.Fatal(err)
	}
	// The webhook serves once the manager runs: wait for it, so that no
	// test's first write races its start.
	ok := &kitchenv1alpha1.Order{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec: kitchenv1alpha1.OrderSpec{MealConfig: kitchenv1alpha1.MealConfig{Main: "tea"}, Sets: 1, Chef: "ana"}}
	eventually(NewWithT(t), func(g Gomega) {
		g.Expect(c.Create(t.Context(), ok, client.DryRunAll)).To(Succeed())
	}).Should(Succeed())
	return c
}

// eventually is Gomega's Eventually with the suite's timeout and polling.
func eventually(g Gomega, f any) AsyncAssertion {
	return g.Eventually(f).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond)
}

// hasCondition asserts the Ready condition's status and reason and returns it.
func hasCondition(g Gomega, conds []metav1.Condition, status metav1.ConditionStatus, reason string) *metav1.Condition {
	c := meta.FindStatusCondition(conds, kitchenv1alpha1.ReadyCondition)
	g.Expect(c).NotTo(BeNil(), "Ready condition")
	g.Expect(c.Status).To(Equal(status), "Ready: %s (%s)", c.Reason, c.Message)
	g.Expect(c.Reason).To(Equal(reason), "Ready reason (message %q)", c.Message)
	return c
}
