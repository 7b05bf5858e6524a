package security

import "testing"

// apiRequests sums kube-apiserver's apiserver_request_total over the
// requests on any of resources with any of verbs (GET, LIST, WATCH ...):
// what the manager asked the API server, measured, not assumed. A webhook
// answering from the cache, a receiver refusing before reading, leave it
// unchanged.
func apiRequests(t *testing.T, resources []string, verbs ...string) float64 {
	t.Helper()
	return env.APIRequests(t, resources, verbs...)
}
