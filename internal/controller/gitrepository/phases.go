package gitrepository

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gitopsv1alpha1 "github.com/converge-dev/converge/api/gitops/v1alpha1"
	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/git"
	gitopsspec "github.com/converge-dev/converge/internal/gitops/spec"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// scope holds what one reconciliation observed.
type scope struct {
	repo *gitopsv1alpha1.GitRepository
	now  time.Time

	suspended bool
	// fetched is set when a new artifact was stored in this run.
	fetched *gitopsv1alpha1.Artifact
	// failure is why the fetch failed; stalled failures wait for a change.
	failure *failure
}

type failure struct {
	reason, message string
	stalled         bool
}

func (s *scope) fail(reason string, stalled bool, format string, args ...any) {
	s.failure = &failure{reason: reason, message: fmt.Sprintf(format, args...), stalled: stalled}
}

func (r *Reconciler) reconcileFetch(ctx context.Context, s *scope) (ctrl.Result, error) {
	repo := s.repo
	spec := repo.Spec
	if errs := gitopsspec.ValidateGitRepositorySpec(&spec, field.NewPath("spec")); len(errs) > 0 {
		s.fail(gitopsv1alpha1.InvalidSpecReason, true, "%s", errs.ToAggregate().Error())
		return ctrl.Result{}, reconcile.TerminalError(errs.ToAggregate())
	}
	if spec.Suspend {
		s.suspended = true
		return ctrl.Result{}, nil
	}
	if v, ok := creconcile.RequestedAt(repo); ok {
		repo.Status.LastHandledReconcileAt = v
	}
	interval := durationOr(spec.Interval, gitopsspec.DefaultGitRepoInterval)
	timeout := durationOr(spec.Timeout, gitopsspec.DefaultGitRepoTimeout)

	creds, err := r.credentials(ctx, repo)
	if err != nil {
		s.fail(gitopsv1alpha1.AuthenticationFailedReason, false, "%v", err)
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	ref := git.Ref{Branch: gitopsspec.DefaultBranch}
	if spec.Ref != nil && *spec.Ref != (gitopsv1alpha1.GitRepositoryRef{}) {
		ref = git.Ref{Branch: spec.Ref.Branch, Tag: spec.Ref.Tag, SemVer: spec.Ref.SemVer, Commit: spec.Ref.Commit}
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resolved, err := r.Git.Resolve(fctx, spec.URL, ref, creds)
	if err != nil {
		r.gitFailure(s, err)
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	// The cheap path: same commit, same rules, artifact still on disk.
	if a := repo.Status.Artifact; a != nil && a.Revision == resolved.Revision() &&
		repo.Status.ObservedGeneration == repo.Generation &&
		r.Store.Has(repo.Namespace, repo.Name, a.Revision, a.Digest) {
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	// A revision found too large stays too large: not fetched again until
	// the ref moves or the spec changes.
	if c := meta.FindStatusCondition(repo.Status.Conditions, gitopsv1alpha1.StalledCondition); c != nil &&
		c.Reason == gitopsv1alpha1.ArtifactTooLargeReason && c.ObservedGeneration == repo.Generation &&
		strings.Contains(c.Message, resolved.Revision()) {
		s.fail(c.Reason, true, "%s", c.Message)
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Fetching revision", "revision", resolved.Revision())
	tmp, err := r.Store.TempDir(repo.Namespace, repo.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	commit, err := r.Git.Checkout(fctx, spec.URL, resolved, creds, tmp)
	if errors.Is(err, git.ErrTooLarge) {
		s.fail(gitopsv1alpha1.ArtifactTooLargeReason, true, "revision %s: %v (the manager's --gitops-max-fetch-size and --gitops-max-artifact-size)", resolved.Revision(), err)
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	if err != nil {
		r.gitFailure(s, err)
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	if err := applyIgnore(tmp, spec.Ignore); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying ignore rules: %w", err)
	}
	digest, err := dirDigest(tmp)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("hashing the artifact: %w", err)
	}
	rev := resolved.Revision()
	if err := r.Store.Put(repo.Namespace, repo.Name, rev, digest, tmp); err != nil {
		return ctrl.Result{}, err
	}
	a := &gitopsv1alpha1.Artifact{
		Revision:       rev,
		Message:        creconcile.Truncate(commit.Message, 1024),
		Author:         creconcile.Truncate(commit.Author, 512),
		LastUpdateTime: metav1.NewTime(s.now),
		Digest:         digest,
	}
	if !commit.Time.IsZero() {
		a.CommitTime = &metav1.Time{Time: commit.Time}
	}
	changed := repo.Status.Artifact == nil || repo.Status.Artifact.Revision != a.Revision || repo.Status.Artifact.Digest != a.Digest
	repo.Status.Artifact = a
	if changed {
		s.fetched = a
	}
	// Keep the previous artifact: a Sync may be rendering it right now.
	if err := r.Store.GC(repo.Namespace, repo.Name, 2); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Removing old artifacts")
	}
	return ctrl.Result{RequeueAfter: interval}, nil
}

func (r *Reconciler) gitFailure(s *scope, err error) {
	switch {
	case egress.Denial(err) != nil:
		s.fail(gitopsv1alpha1.URLNotAllowedReason, true, "spec.url: %v", egress.Denial(err))
	case errors.Is(err, git.ErrAuth):
		s.fail(gitopsv1alpha1.AuthenticationFailedReason, false, "%v", err)
	case errors.Is(err, git.ErrRefNotFound):
		s.fail(gitopsv1alpha1.RefNotFoundReason, false, "%v", err)
	default:
		s.fail(gitopsv1alpha1.GitOperationFailedReason, false, "%v", err)
	}
}

func (r *Reconciler) credentials(ctx context.Context, repo *gitopsv1alpha1.GitRepository) (git.Credentials, error) {
	if repo.Spec.SecretRef == nil {
		return nil, nil
	}
	sec := &corev1.Secret{}
	key := types.NamespacedName{Namespace: repo.Namespace, Name: repo.Spec.SecretRef.Name}
	if err := r.APIReader.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %s not found (spec.secretRef)", key)
		}
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("the manager may not read secret %s (spec.secretRef): grant its service account get on secrets in namespace %s (docs/gitops.md, Permissions)", key, key.Namespace)
		}
		return nil, fmt.Errorf("reading secret %s: %w", key, err)
	}
	return git.Credentials(sec.Data), nil
}

// applyIgnore deletes the files matching the .gitignore-style patterns.
func applyIgnore(dir, rules string) error {
	var ps []gitignore.Pattern
	for _, line := range strings.Split(rules, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ps = append(ps, gitignore.ParsePattern(line, nil))
	}
	if len(ps) == 0 {
		return nil
	}
	m := gitignore.NewMatcher(ps)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if m.Match(strings.Split(filepath.ToSlash(rel), "/"), d.IsDir()) {
			// Through the root: a symlink cannot make this delete outside.
			if err := root.RemoveAll(rel); err != nil {
				return err
			}
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
}

// dirDigest is a sha256 over the sorted relative paths and contents.
func dirDigest(dir string) (string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		_, _ = io.WriteString(h, filepath.ToSlash(rel)+"\x00")
		fh, err := os.Open(f)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, fh)
		_ = fh.Close()
		if err != nil {
			return "", err
		}
		_, _ = h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return def
	}
	return d.Duration
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
