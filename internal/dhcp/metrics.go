package dhcp

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_dhcp_requests_total",
		Help: "DHCP requests the agent handled, by message type (DISCOVER, REQUEST, RELEASE, DECLINE, INFORM, ...).",
	}, []string{"type"})
	requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "converge_dhcp_request_duration_seconds",
		Help:    "Time the agent took to answer one DHCP request (lease latency inside the agent), by message type.",
		Buckets: []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05},
	}, []string{"type"})
	netbootRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_netboot_requests_total",
		Help: "Network boot HTTP requests the agent answered, by file (script, vmlinuz, initrd.gz, other) and HTTP status code.",
	}, []string{"file", "code"})
	// PoolUsed is the allocated addresses of each IPPool.
	PoolUsed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_ippool_used",
		Help: "Addresses allocated in an IPPool (status.ipv4.used).",
	}, []string{"namespace", "name", "network"})
	// PoolAvailable is the free addresses of each IPPool.
	PoolAvailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_ippool_available",
		Help: "Free addresses of an IPPool's range (status.ipv4.available).",
	}, []string{"namespace", "name", "network"})
)

func init() {
	metrics.Registry.MustRegister(requestsTotal, requestSeconds, netbootRequests, PoolUsed, PoolAvailable)
}

// Record counts one handled request in the agent's metrics; pass it as
// Server.Observe.
func Record(msgType string, d time.Duration) {
	requestsTotal.WithLabelValues(msgType).Inc()
	requestSeconds.WithLabelValues(msgType).Observe(d.Seconds())
}
