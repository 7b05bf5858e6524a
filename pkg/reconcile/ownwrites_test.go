package reconcile_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/internal/testenv"
	"github.com/converge-dev/converge/pkg/reconcile"
)

// TestOwnWritesWithoutEvents: with no informer attached, only a copy at or
// past the write clears it, and the TTL.
func TestOwnWritesWithoutEvents(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}, Data: map[string]string{"v": "1"}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	v1 := cm.DeepCopy()
	cm.Data["v"] = "2"
	g.Expect(env.Client.Update(ctx, cm)).To(Succeed())
	key := client.ObjectKeyFromObject(cm)

	now := time.Now()
	w := reconcile.NewOwnWrites(time.Minute)
	reconcile.SetOwnWritesClock(w, func() time.Time { return now })
	g.Expect(w.Behind(key, v1)).To(BeFalse(), "nothing written: never behind")
	w.Wrote(cm)
	g.Expect(w.Behind(key, v1)).To(BeTrue(), "a copy older than the write")
	g.Expect(w.Behind(key, nil)).To(BeTrue(), "no copy at all")
	g.Expect(w.Pending()).To(Equal(1))
	g.Expect(w.Behind(key, cm)).To(BeFalse(), "the written version itself")
	g.Expect(w.Behind(key, v1)).To(BeFalse(), "seen once, the record is gone")
	g.Expect(w.Pending()).To(Equal(0))

	w.Wrote(cm)
	g.Expect(w.Behind(key, nil)).To(BeTrue())
	now = now.Add(time.Minute + time.Second)
	g.Expect(w.Behind(key, nil)).To(BeFalse(), "past the TTL a write is no longer waited for")

	var nilW *reconcile.OwnWrites
	nilW.Wrote(cm)
	g.Expect(nilW.Behind(key, nil)).To(BeFalse())
}

// TestOwnWritesFollowTheCache: with the informer's events, the record
// clears as soon as the cache has come past the write, for a create, an
// update and a delete, without any read of the object.
func TestOwnWritesFollowTheCache(t *testing.T) {
	testenv.Need(t, env)
	g := NewWithT(t)
	ctx := t.Context()
	ns := env.NewNamespace(t)
	informers, err := cache.New(env.Config, cache.Options{Scheme: env.Client.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	g.Expect(err).NotTo(HaveOccurred())
	w := reconcile.NewOwnWrites(time.Hour)
	g.Expect(w.Track(ctx, informers, &corev1.ConfigMap{})).To(Succeed())
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = informers.Start(cctx) }()
	g.Expect(informers.WaitForCacheSync(ctx)).To(BeTrue())

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}, Data: map[string]string{"v": "1"}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	key := client.ObjectKeyFromObject(cm)
	w.Wrote(cm)
	testenv.Eventually(g, func(g Gomega) { g.Expect(w.Behind(key, nil)).To(BeFalse()) }).Should(Succeed())
	var cached corev1.ConfigMap
	g.Expect(informers.Get(ctx, key, &cached)).To(Succeed(), "the cache holds what the events showed")

	// A write the cache's events have not reached yet (a version a few
	// writes ahead: the informer is usually faster than this test) stays
	// pending until the events pass it, whatever object they are about.
	rv, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
	g.Expect(err).NotTo(HaveOccurred())
	ahead := cm.DeepCopy()
	ahead.ResourceVersion = strconv.FormatInt(rv+5, 10)
	w.Wrote(ahead)
	g.Expect(w.Behind(key, nil)).To(BeTrue())
	g.Expect(w.Behind(key, cm)).To(BeTrue(), "a copy older than the write")
	for i := range 5 {
		other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("other-%d", i)}}
		g.Expect(env.Client.Create(ctx, other)).To(Succeed())
	}
	testenv.Eventually(g, func(g Gomega) { g.Expect(w.Behind(key, nil)).To(BeFalse()) }).Should(Succeed())

	v1 := cm.DeepCopy()
	cm.Data["v"] = "2"
	g.Expect(env.Client.Update(ctx, cm)).To(Succeed())
	w.Wrote(cm)
	testenv.Eventually(g, func(g Gomega) { g.Expect(w.Behind(key, v1)).To(BeFalse()) }).Should(Succeed())
	g.Expect(informers.Get(ctx, key, &cached)).To(Succeed())
	g.Expect(cached.Data).To(HaveKeyWithValue("v", "2"))

	// Written, then deleted by someone else: the delete's event moves the
	// cache past the write; the missing object is not waited for.
	cm.Data["v"] = "3"
	g.Expect(env.Client.Update(ctx, cm)).To(Succeed())
	w.Wrote(cm)
	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed())
	testenv.Eventually(g, func(g Gomega) { g.Expect(w.Behind(key, nil)).To(BeFalse()) }).Should(Succeed())
	g.Expect(w.Pending()).To(Equal(0))
}
