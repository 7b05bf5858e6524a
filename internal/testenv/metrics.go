package testenv

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// APIRequests sums kube-apiserver's apiserver_request_total over the
// requests on any of resources with any of verbs (GET, LIST, WATCH ...):
// what clients asked the API server, measured, not assumed. It counts every
// client of the control plane (the test's own requests too), so measure a
// window in which only the code under test reads those resources.
func (e *Environment) APIRequests(t testing.TB, resources []string, verbs ...string) float64 {
	t.Helper()
	return e.requestTotal(t, func(l string) bool { return labelIn(l, "resource", resources) && labelIn(l, "verb", verbs) })
}

// requestTotal sums kube-apiserver's apiserver_request_total over the
// series (metric lines) that match says yes to.
func (e *Environment) requestTotal(t testing.TB, match func(line string) bool) float64 {
	t.Helper()
	raw, err := e.Clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") || !match(l) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", l, err)
		}
		sum += v
	}
	return sum
}

// labelIn says whether the metric line l has label name set to one of
// values.
func labelIn(l, name string, values []string) bool {
	for _, v := range values {
		if strings.Contains(l, name+`="`+v+`"`) {
			return true
		}
	}
	return false
}
