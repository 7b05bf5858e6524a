package sync

import (
	"bytes"
	"reflect"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// ignoredPaths change without anyone editing the object.
var ignoredPaths = []string{
	".metadata.managedFields", ".metadata.resourceVersion", ".metadata.generation",
	".metadata.creationTimestamp", ".metadata.uid", ".status",
}

// diffPaths lists the field paths (".spec.replicas", ".data.key") where a
// and b differ, lists compared whole, at most limit, sorted.
func diffPaths(a, b map[string]any, limit int) []string {
	var out []string
	var walk func(p string, x, y any)
	walk = func(p string, x, y any) {
		if slices.Contains(ignoredPaths, p) {
			return
		}
		xm, xok := x.(map[string]any)
		ym, yok := y.(map[string]any)
		if xok && yok {
			keys := map[string]bool{}
			for k := range xm {
				keys[k] = true
			}
			for k := range ym {
				keys[k] = true
			}
			for k := range keys {
				walk(p+"."+k, xm[k], ym[k])
			}
			return
		}
		if !reflect.DeepEqual(x, y) {
			out = append(out, p)
		}
	}
	walk("", a, b)
	sort.Strings(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// managersOf names the field managers (other than ours) that own any of the
// changed paths on live; if none matches, the most recent other writer.
func managersOf(live *unstructured.Unstructured, changed []string) []string {
	var out []string
	var latest *metav1.ManagedFieldsEntry
	for i, mf := range live.GetManagedFields() {
		if mf.Manager == FieldManager || mf.Subresource != "" {
			continue
		}
		if latest == nil || (mf.Time != nil && latest.Time != nil && mf.Time.After(latest.Time.Time)) {
			latest = &live.GetManagedFields()[i]
		}
		if mf.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(mf.FieldsV1.GetRawBytes())); err != nil {
			continue
		}
		hit := false
		set.Iterate(func(p fieldpath.Path) {
			ps := p.String()
			for _, c := range changed {
				if strings.HasPrefix(ps, c) || strings.HasPrefix(c, ps+".") {
					hit = true
				}
			}
		})
		if hit && !slices.Contains(out, mf.Manager) {
			out = append(out, mf.Manager)
		}
	}
	if len(out) == 0 && latest != nil {
		out = append(out, latest.Manager)
	}
	sort.Strings(out)
	return out
}
