// Package apicount reads kube-apiserver's apiserver_request_total, so a
// benchmark can say how many API requests a phase cost and of which kind
// (the client-side budget turns those counts into time).
package apicount

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// Counts are apiserver_request_total by "VERB resource[/subresource]".
type Counts map[string]float64

// Scrape reads the API server's request counters.
func Scrape(ctx context.Context, cs kubernetes.Interface) (Counts, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading kube-apiserver metrics: %w", err)
	}
	defer func() { _ = body.Close() }()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(body)
	if err != nil {
		return nil, fmt.Errorf("parsing kube-apiserver metrics: %w", err)
	}
	fam := fams["apiserver_request_total"]
	if fam == nil {
		return nil, fmt.Errorf("kube-apiserver exposes no apiserver_request_total")
	}
	out := Counts{}
	for _, m := range fam.GetMetric() {
		l := labels(m)
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// Minus is c - o, keeping the positive differences.
func (c Counts) Minus(o Counts) Counts {
	out := Counts{}
	for k, v := range c {
		if d := v - o[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// Writes keeps the requests that change something (every verb but GET,
// LIST and WATCH) on resources (by name, subresources included).
func (c Counts) Writes(resources ...string) Counts { return c.filter(isWrite, resources) }

// Reads keeps the GET and LIST requests on resources (by name,
// subresources included): uncached reads spend a client's budget as writes
// do.
func (c Counts) Reads(resources ...string) Counts { return c.filter(isRead, resources) }

// AllWrites keeps the requests that change something, on every resource.
func (c Counts) AllWrites() Counts {
	out := Counts{}
	for k, v := range c {
		if verb, _, _ := strings.Cut(k, " "); isWrite(verb) {
			out[k] = v
		}
	}
	return out
}

func isRead(verb string) bool  { return verb == "GET" || verb == "LIST" }
func isWrite(verb string) bool { return !isRead(verb) && verb != "WATCH" }

// filter keeps the requests whose verb passes keep on resources (by name,
// subresources included).
func (c Counts) filter(keep func(verb string) bool, resources []string) Counts {
	out := Counts{}
	for k, v := range c {
		verb, res, _ := strings.Cut(k, " ")
		name, _, _ := strings.Cut(res, "/")
		if keep(verb) && slices.Contains(resources, name) {
			out[k] = v
		}
	}
	return out
}

// Total is the sum of the counts.
func (c Counts) Total() float64 {
	var t float64
	for _, v := range c {
		t += v
	}
	return t
}

// String lists the counts, largest first: "PATCH certificates/status=2000 ...".
func (c Counts) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c[keys[i]] > c[keys[j]] || (c[keys[i]] == c[keys[j]] && keys[i] < keys[j]) })
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%.0f", k, c[k])
	}
	return b.String()
}
