package sync

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	driftTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_sync_drift_total",
		Help: "Out-of-band changes to objects applied by a Sync, by Sync and action (Corrected or Reported).",
	}, []string{"namespace", "name", "action"})
	driftCorrectionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "converge_sync_drift_correction_seconds",
		Help:    "Time from a watch seeing an out-of-band change to its correction.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
	})
	applyResults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_sync_apply_objects_total",
		Help: "Objects handled by Sync applies and prunes, by result (created, configured, unchanged, deleted, skipped).",
	}, []string{"result"})
	inventoryObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_sync_inventory_objects",
		Help: "Objects in a Sync's inventory.",
	}, []string{"namespace", "name"})
)

func init() {
	metrics.Registry.MustRegister(driftTotal, driftCorrectionSeconds, applyResults, inventoryObjects)
}
