package certificate

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	pkiv1alpha1 "github.com/converge-dev/converge/api/pki/v1alpha1"
)

// The per-Certificate gauges are made at scrape time from the Certificates
// in the manager's cache (their status is what the controller wrote),
// rather than kept in GaugeVecs: five series per Certificate held 2.6-5 MiB
// of label pairs for 1000 Certificates (bench/README.md, "Memory of the
// manager, certificates"). A Certificate's series go away with it, as
// before.
var (
	expiryDesc = prometheus.NewDesc("converge_certificate_expiration_timestamp_seconds",
		"The notAfter of the certificate in each Certificate's Secret, in Unix seconds.",
		[]string{"namespace", "name", "issuer_name", "issuer_kind", "issuer_group"}, nil)
	renewalDesc = prometheus.NewDesc("converge_certificate_renewal_timestamp_seconds",
		"When each Certificate will be renewed, in Unix seconds.",
		[]string{"namespace", "name", "issuer_name", "issuer_kind", "issuer_group"}, nil)
	readyDesc = prometheus.NewDesc("converge_certificate_ready_status",
		"The Ready condition of each Certificate: 1 for the condition's current status, 0 for the others.",
		[]string{"namespace", "name", "condition", "issuer_name", "issuer_kind", "issuer_group"}, nil)
)

// metricsTimeout bounds the cache read of one scrape.
const metricsTimeout = 5 * time.Second

// collector reports the gauges of the Certificates its readers list (one
// per running manager: a test process may run several, a shard each); it
// reports nothing while no manager's controller runs (a standby replica, or
// before leader election), so a scrape never starts an informer.
type collector struct {
	mu      sync.Mutex
	readers map[*client.Reader]struct{}
}

var certificateMetrics = &collector{readers: map[*client.Reader]struct{}{}}

func init() { metrics.Registry.MustRegister(certificateMetrics) }

// Describe implements prometheus.Collector.
func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- expiryDesc
	ch <- renewalDesc
	ch <- readyDesc
}

// Collect implements prometheus.Collector.
func (m *collector) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	readers := make([]client.Reader, 0, len(m.readers))
	for r := range m.readers {
		readers = append(readers, *r)
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout) //nolint:forbidigo // a scrape has no request context
	defer cancel()
	seen := map[types.NamespacedName]bool{}
	for _, r := range readers {
		var l pkiv1alpha1.CertificateList
		// Read-only: the cached objects themselves, not copies.
		if err := r.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
			continue
		}
		for i := range l.Items {
			c := &l.Items[i]
			if key := client.ObjectKeyFromObject(c); !seen[key] {
				seen[key] = true
				collectCertificate(ch, c)
			}
		}
	}
}

// collectCertificate sends one Certificate's series.
func collectCertificate(ch chan<- prometheus.Metric, c *pkiv1alpha1.Certificate) {
	name, kind, group := issuerLabels(c)
	if c.Status.NotAfter != nil {
		ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(c.Status.NotAfter.Unix()), c.Namespace, c.Name, name, kind, group)
	}
	if c.Status.RenewalTime != nil {
		ch <- prometheus.MustNewConstMetric(renewalDesc, prometheus.GaugeValue, float64(c.Status.RenewalTime.Unix()), c.Namespace, c.Name, name, kind, group)
	}
	status := "Unknown"
	if cond := meta.FindStatusCondition(c.Status.Conditions, pkiv1alpha1.ReadyCondition); cond != nil {
		status = string(cond.Status)
	}
	for _, s := range []string{"True", "False", "Unknown"} {
		v := 0.0
		if s == status {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, v, c.Namespace, c.Name, s, name, kind, group)
	}
}

// addMetrics makes the collector read mgr's cache while mgr's controllers
// run (after leader election), and stop when they stop.
func addMetrics(mgr ctrl.Manager) error {
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		var r client.Reader = mgr.GetCache()
		certificateMetrics.mu.Lock()
		certificateMetrics.readers[&r] = struct{}{}
		certificateMetrics.mu.Unlock()
		<-ctx.Done()
		certificateMetrics.mu.Lock()
		delete(certificateMetrics.readers, &r)
		certificateMetrics.mu.Unlock()
		return nil
	}))
}
