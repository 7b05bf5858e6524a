package reconcilecli_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/internal/graph"
	"github.com/converge-dev/converge/internal/reconcilecli"
)

// TestRequestableKindsAreTheCRDsThatRecordTheRequest holds the one table
// (graph.Kinds, Requestable) in step with the API: a kind is requestable
// exactly when its CRD declares status.lastHandledReconcileAt, where its
// controller records the request it handled and the verb waits for it. A
// kind whose controller starts honouring the request, and is not marked,
// fails here; so does a mark on a kind that cannot say it handled one.
func TestRequestableKindsAreTheCRDsThatRecordTheRequest(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	var want []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			if _, ok := v.Schema.OpenAPIV3Schema.Properties["status"].Properties["lastHandledReconcileAt"]; ok {
				want = append(want, strings.ToLower(crd.Spec.Names.Kind))
				break
			}
		}
	}
	got := graph.Requestable()
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("requestable kinds (graph.Kinds) are %v; the CRDs that record status.lastHandledReconcileAt are %v", got, want)
	}
	if len(want) < 3 {
		t.Fatalf("expected at least sync, gitrepository and database, found %v", want)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		kind    string
		name    string
		wantErr string
	}{
		{args: []string{"database/orders"}, kind: "Database", name: "orders"},
		{args: []string{"sqldb", "orders"}, kind: "Database", name: "orders"},
		{args: []string{"sync/app"}, kind: "Sync", name: "app"},
		{args: []string{"sy", "app"}, kind: "Sync", name: "app"},
		{args: []string{"gitrepo/app"}, kind: "GitRepository", name: "app"},
		{args: []string{"gitrepository", "app"}, kind: "GitRepository", name: "app"},
		{args: []string{"certificate/web"}, wantErr: "certificate cannot be asked to reconcile: want one of sync, gitrepository, database"},
		{args: []string{"nosuchkind/x"}, wantErr: `unknown kind "nosuchkind"`},
		{args: []string{"database"}, wantErr: "want KIND/NAME"},
		{args: []string{"database/a", "b"}, wantErr: "want KIND/NAME or KIND NAME"},
	} {
		ref, err := reconcilecli.ParseArgs(tc.args, "ns")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if ref.Kind != tc.kind || ref.Name != tc.name || ref.Namespace != "ns" {
			t.Errorf("%v: got %+v, want %s %s in ns", tc.args, ref, tc.kind, tc.name)
		}
	}
}
