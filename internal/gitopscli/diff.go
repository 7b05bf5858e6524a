package gitopscli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/git"
	"github.com/converge-dev/converge/internal/gitops/placement"
	"github.com/converge-dev/converge/internal/gitops/render"
)

// syncFieldManager must equal the Sync controller's field manager, so the
// dry-run shows what the controller's apply would do.
const syncFieldManager = "converge-sync"

// DiffOptions tune Diff.
type DiffOptions struct {
	// Revision is a commit to diff instead of the GitRepository's ref.
	Revision string
	// Render bounds the render as the manager's flags do; zero fields
	// take the defaults. The render is confined to the fetched revision,
	// as in the manager: a workstation's files and network are never read.
	Render render.Options
}

// Diff fetches the Sync's source (the GitRepository's ref, or
// opts.Revision), renders it, server-side dry-runs every object as the Sync
// would apply it, and prints what would be created, changed and pruned as a
// unified diff. It changes nothing. It returns whether anything differs.
func Diff(ctx context.Context, c client.Client, out io.Writer, key types.NamespacedName, opts DiffOptions) (bool, error) {
	sy := &gitopsv1alpha1.Sync{}
	if err := c.Get(ctx, key, sy); err != nil {
		return false, err
	}
	srcKey := types.NamespacedName{Namespace: sy.Spec.SourceRef.Namespace, Name: sy.Spec.SourceRef.Name}
	if srcKey.Namespace == "" {
		srcKey.Namespace = sy.Namespace
	}
	repo := &gitopsv1alpha1.GitRepository{}
	if err := c.Get(ctx, srcKey, repo); err != nil {
		return false, fmt.Errorf("reading GitRepository %s: %w", srcKey, err)
	}
	var creds git.Credentials
	if repo.Spec.SecretRef != nil {
		sec := &corev1.Secret{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: repo.Spec.SecretRef.Name}, sec); err != nil {
			return false, fmt.Errorf("reading the GitRepository's secret: %w", err)
		}
		creds = sec.Data
	}
	ref := git.Ref{Branch: "main"}
	if r := repo.Spec.Ref; r != nil && *r != (gitopsv1alpha1.GitRepositoryRef{}) {
		ref = git.Ref{Branch: r.Branch, Tag: r.Tag, SemVer: r.SemVer, Commit: r.Commit}
	}
	if opts.Revision != "" {
		ref = git.Ref{Branch: ref.Branch, Commit: opts.Revision}
	}
	gc := git.Client{}
	resolved, err := gc.Resolve(ctx, repo.Spec.URL, ref, creds)
	if err != nil {
		return false, fmt.Errorf("resolving %s: %w", repo.Spec.URL, err)
	}
	dir, err := os.MkdirTemp("", "converge-diff-")
	if err != nil {
		return false, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if _, err := gc.Checkout(ctx, repo.Spec.URL, resolved, creds, dir); err != nil {
		return false, fmt.Errorf("fetching %s: %w", resolved.Revision(), err)
	}
	objs, err := render.Render(ctx, dir, sy.Spec.Path, opts.Render)
	if err != nil {
		return false, fmt.Errorf("revision %s: %w", resolved.Revision(), err)
	}
	fmt.Fprintf(out, "Sync %s at revision %s (%d objects)\n", key, resolved.Revision(), len(objs))

	desired := map[string]bool{}
	changed := false
	unchanged := 0
	for _, u := range objs {
		if err := prepare(c.RESTMapper(), sy, u); err != nil {
			gvk, name := u.GroupVersionKind(), u.GetName()
			file, _ := render.Locate(ctx, dir, sy.Spec.Path, opts.Render, func(o *unstructured.Unstructured) bool {
				return o.GroupVersionKind() == gvk && o.GetName() == name
			})
			return changed, fmt.Errorf("revision %s: %s %s in %s: %w", resolved.Revision(), gvk.Kind, name, file, err)
		}
		id := objectID(u.GroupVersionKind().Group, u.GetKind(), u.GetNamespace(), u.GetName())
		desired[id] = true
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKeyFromObject(u), live)
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return changed, fmt.Errorf("reading %s: %w", id, err)
		}
		dry := u.DeepCopy()
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(dry), client.FieldOwner(syncFieldManager), client.ForceOwnership, client.DryRunAll); err != nil {
			return changed, fmt.Errorf("dry-run applying %s: %w", id, err)
		}
		if !exists {
			changed = true
			fmt.Fprintf(out, "+ %s created\n", id)
			continue
		}
		a, b := cleanYAML(live), cleanYAML(dry)
		if a == b {
			unchanged++
			continue
		}
		changed = true
		fmt.Fprintf(out, "~ %s configured\n", id)
		d, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(a), B: difflib.SplitLines(b),
			FromFile: "live", ToFile: "git", Context: 2})
		fmt.Fprint(out, indent(d))
	}
	var prune []string
	for _, r := range sy.Status.Inventory {
		id := objectID(r.Group, r.Kind, r.Namespace, r.Name)
		if !desired[id] {
			prune = append(prune, id)
		}
	}
	sort.Strings(prune)
	for _, id := range prune {
		changed = true
		if sy.Spec.Prune != nil && *sy.Spec.Prune {
			fmt.Fprintf(out, "- %s pruned\n", id)
		} else {
			fmt.Fprintf(out, "- %s orphaned (prune: false)\n", id)
		}
	}
	fmt.Fprintf(out, "%d unchanged\n", unchanged)
	return changed, nil
}

func objectID(group, kind, ns, name string) string {
	gk := kind
	if group != "" {
		gk += "." + group
	}
	if ns == "" {
		return gk + "/" + name
	}
	return gk + "/" + ns + "/" + name
}

// prepare sets the labels and the namespace the controller would set (the
// same rule: internal/gitops/placement).
func prepare(m meta.RESTMapper, sy *gitopsv1alpha1.Sync, u *unstructured.Unstructured) error {
	l := u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[gitopsv1alpha1.SyncNameLabel] = sy.Name
	l[gitopsv1alpha1.SyncNamespaceLabel] = sy.Namespace
	u.SetLabels(l)
	ns, err := placement.Namespace(m, sy, u)
	if err != nil {
		return err
	}
	u.SetNamespace(ns)
	return nil
}

// cleanYAML renders an object without server-managed metadata and status.
func cleanYAML(u *unstructured.Unstructured) string {
	c := u.DeepCopy()
	c.SetManagedFields(nil)
	c.SetResourceVersion("")
	c.SetGeneration(0)
	c.SetUID("")
	c.SetCreationTimestamp(metav1.Time{})
	unstructured.RemoveNestedField(c.Object, "status")
	b, _ := yaml.Marshal(c.Object)
	return string(b)
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}
