package kitchen_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/examples/kitchen"
	kitchenv1alpha1 "github.com/converge-dev/converge/examples/kitchen/api/v1alpha1"
	"github.com/converge-dev/converge/internal/testenv"
)

var env *testenv.Environment

// The suite runs on a real control plane with kube-controller-manager (its
// garbage collector deletes an Order's Meals) and none of Converge's
// controllers: the kitchen's own manager runs the Order controller, as
// cmd/kitchen does.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{NoManager: true, ControllerManager: true}, &env))
}

// An Order with sets: 3 gets three Meals it controls and is processed and
// Ready; scaled to 1, the extra Meals go; a new chef reaches the Meal left;
// deleted, its Meals are collected.
func TestOrderCooksItsMeals(t *testing.T) {
	testenv.Need(t, env)
	c := startKitchen(t)
	ns := env.NewNamespace(t)
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
		testenv.Eventually(g, func(g Gomega) {
			got := &kitchenv1alpha1.Order{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), got)).To(Succeed())
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.Processed).To(BeTrue())
			g.Expect(got.Status.Meals).To(Equal(sets))
			testenv.HasCondition(g, got.Status.Conditions, kitchenv1alpha1.ReadyCondition, metav1.ConditionTrue, kitchenv1alpha1.ServedReason)
			testenv.ExpectKstatus(ctx, g, c, got, kstatus.CurrentStatus, "")

			meals := mealsOf(ctx, g, c, o)
			g.Expect(meals).To(HaveLen(int(sets)))
			for i := range meals {
				m := &meals[i]
				g.Expect(m.Spec.Set).To(Equal(int32(i)))
				g.Expect(m.Spec.Chef).To(Equal(chef))
				g.Expect(m.Spec.MealConfig).To(Equal(o.Spec.MealConfig))
				g.Expect(metav1.IsControlledBy(m, got)).To(BeTrue(), "Meal %s is controlled by the Order", m.Name)
				g.Expect(m.OwnerReferences[0].BlockOwnerDeletion).To(Equal(ptr.To(true)))
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
	// not the controller) deletes its Meals. It learns of new CRDs on its
	// discovery resync, every 30 s, so on a fresh control plane it may
	// take that long to act on a kind installed at the start of the test.
	start := time.Now()
	g.Expect(c.Delete(ctx, o)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		g.Expect(mealsOf(ctx, g, c, o)).To(BeEmpty())
		g.Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(o), &kitchenv1alpha1.Order{}))).To(BeTrue())
	}).WithTimeout(90 * time.Second).Should(Succeed())
	t.Logf("Meals collected %s after the Order's delete", time.Since(start).Round(time.Millisecond))
}

// An Order that asks for nothing is served at once, with no Meals.
func TestEmptyOrder(t *testing.T) {
	testenv.Need(t, env)
	c := startKitchen(t)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	ctx := t.Context()

	o := &kitchenv1alpha1.Order{
		ObjectMeta: metav1.ObjectMeta{Name: "nothing", Namespace: ns},
		Spec:       kitchenv1alpha1.OrderSpec{MealConfig: kitchenv1alpha1.MealConfig{Main: "tea"}, Chef: "ana"},
	}
	g.Expect(c.Create(ctx, o)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) {
		got := &kitchenv1alpha1.Order{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), got)).To(Succeed())
		g.Expect(got.Status.Processed).To(BeTrue())
		testenv.HasCondition(g, got.Status.Conditions, kitchenv1alpha1.ReadyCondition, metav1.ConditionTrue, kitchenv1alpha1.ServedReason)
	}).Should(Succeed())
	g.Expect(mealsOf(ctx, g, c, o)).To(BeEmpty())
}

// The schema refuses an Order without a chef or with negative sets.
func TestOrderValidation(t *testing.T) {
	testenv.Need(t, env)
	c := startKitchen(t)
	ns := env.NewNamespace(t)
	g := NewWithT(t)
	for name, spec := range map[string]kitchenv1alpha1.OrderSpec{
		"no-chef":       {MealConfig: kitchenv1alpha1.MealConfig{Main: "soup"}, Sets: 1},
		"negative-sets": {MealConfig: kitchenv1alpha1.MealConfig{Main: "soup"}, Sets: -1, Chef: "ana"},
		"no-main":       {Sets: 1, Chef: "ana"},
	} {
		err := c.Create(t.Context(), &kitchenv1alpha1.Order{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec})
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
	}
}

// mealsOf lists o's Meals from the API server, by set.
func mealsOf(ctx context.Context, g Gomega, c client.Client, o *kitchenv1alpha1.Order) []kitchenv1alpha1.Meal {
	var meals kitchenv1alpha1.MealList
	g.Expect(c.List(ctx, &meals, client.InNamespace(o.Namespace), client.MatchingLabels{kitchenv1alpha1.OrderLabel: o.Name})).To(Succeed())
	slices.SortFunc(meals.Items, func(a, b kitchenv1alpha1.Meal) int { return int(a.Spec.Set - b.Spec.Set) })
	return meals.Items
}

// startKitchen installs the kitchen CRDs (config/crd, as generated) and runs
// the Order controller in its own manager until the test ends. It returns a
// direct client that knows the kitchen types.
func startKitchen(t *testing.T) client.Client {
	t.Helper()
	installCRDs(t)
	scheme := runtime.NewScheme()
	if err := kitchenv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}, // one manager per test
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&kitchen.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kitchen manager: %v", err)
		}
	})
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// installCRDs creates the CRDs in config/crd unless they exist and waits
// until they are established.
func installCRDs(t *testing.T) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("config", "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd (%v)", err)
	}
	g := NewWithT(t)
	for _, f := range files {
		data, err := os.ReadFile(f)
		g.Expect(err).NotTo(HaveOccurred())
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(yaml.UnmarshalStrict(data, crd)).To(Succeed(), f)
		if err := env.Client.Create(t.Context(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s: %v", crd.Name, err)
		}
		g.Eventually(func(g Gomega) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(env.Client.Get(t.Context(), client.ObjectKeyFromObject(crd), got)).To(Succeed())
			g.Expect(got.Status.Conditions).To(ContainElement(And(
				HaveField("Type", apiextensionsv1.Established), HaveField("Status", apiextensionsv1.ConditionTrue))))
		}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), crd.Name)
	}
}
