package database

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// reconcileDelete drops (Delete) or keeps (Retain) the database once this
// controller's finalizer is the last one. Until then it only says what the
// deletion waits for: another controller's finalizer may need the data
// (a backup before delete), so nothing is dropped while one remains.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	d := s.d
	s.deleting = true
	if !slices.Contains(d.Finalizers, sqlv1alpha1.DatabaseFinalizer) {
		return ctrl.Result{}, nil
	}
	var others []string
	for _, f := range d.Finalizers {
		if f != sqlv1alpha1.DatabaseFinalizer {
			others = append(others, f)
		}
	}
	if len(others) > 0 {
		msg := fmt.Sprintf("waiting for finalizers %s to be removed before the database is %s", strings.Join(others, ", "), verb(d))
		if prev := conditionMessage(d, sqlv1alpha1.DeletingCondition); prev != msg {
			r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, sqlv1alpha1.WaitingForFinalizersReason, "Delete", "%s", msg)
		}
		s.deletingReason, s.deletingMessage = sqlv1alpha1.WaitingForFinalizersReason, msg
		return ctrl.Result{}, nil // a finalizer change wakes us
	}
	dbName, owner := resolveNames(d)
	if d.Spec.DeletionPolicy != sqlv1alpha1.DeletionDelete {
		ctrl.LoggerFrom(ctx).Info("Retaining database on the server", "database", dbName, "owner", owner)
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, sqlv1alpha1.RetainedReason, "Delete",
			"deletionPolicy is Retain: database %q and role %q are kept on the server", dbName, owner)
		s.deletingReason, s.deletingMessage = sqlv1alpha1.RetainedReason, "deletionPolicy Retain: nothing is dropped"
		return ctrl.Result{}, r.removeFinalizer(ctx, d)
	}
	t, res, err := r.resolveTarget(ctx, s)
	if t == nil && !s.wasProvisioned {
		// Never observed on the server (for example an instanceRef that
		// never resolved): there is nothing of ours to drop, and waiting for
		// an instance that may never come would block the deletion forever.
		ctrl.LoggerFrom(ctx).Info("Releasing a Database that was never provisioned", "reason", s.reason)
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "NothingToDrop", "Delete",
			"Database %q was never provisioned (%s); nothing is dropped", dbName, s.message)
		s.deletingReason, s.deletingMessage = "NothingToDrop", "never provisioned: nothing to drop"
		return ctrl.Result{}, r.removeFinalizer(ctx, d)
	}
	if t == nil {
		// Never drop blindly and never leave without dropping: the
		// finalizer stays until the server can be reached.
		s.deletingReason, s.deletingMessage = s.reason, "cannot drop yet: "+s.message
		return res, err
	}
	s.deletingReason, s.deletingMessage = sqlv1alpha1.DroppingReason, "terminating connections and dropping"
	if err := r.dropOwned(ctx, s, t); err != nil {
		s.deletingMessage = "dropping failed: " + err.Error()
		return ctrl.Result{}, fmt.Errorf("dropping: %w", err)
	}
	return ctrl.Result{}, r.removeFinalizer(ctx, d)
}

// dropOwned drops the database and the role, each only if the server says
// this Database created (or adopted) it; anything else is kept, with an
// Event. The ownership is read again here, never taken from status.
func (r *Reconciler) dropOwned(ctx context.Context, s *scope, t *target) error {
	d, srv, mine := s.d, t.server, t.spec.Claim
	dbName, owner := t.spec.Name, t.spec.Owner
	db, err := srv.DatabaseOwnership(ctx, dbName)
	if err != nil {
		return err
	}
	role, err := srv.RoleOwnership(ctx, owner)
	if err != nil {
		return err
	}
	var kept []string
	switch {
	case !db.Exists:
	case db.EffectiveClaim() == mine:
		ctrl.LoggerFrom(ctx).Info("Dropping database", "database", dbName)
		if err := srv.DropDatabase(ctx, dbName); err != nil {
			return err
		}
	default:
		kept = append(kept, fmt.Sprintf("database %q", dbName))
	}
	privileged := ""
	if role.Exists {
		if privileged, err = srv.PrivilegedRole(ctx, owner, t.admin.User); err != nil {
			return err
		}
	}
	switch {
	case !role.Exists && role.Claim != mine:
	case role.Claim == mine && privileged == "":
		ctrl.LoggerFrom(ctx).Info("Dropping role", "owner", owner)
		if err := srv.DropRole(ctx, owner, mine); err != nil {
			return err
		}
	default:
		kept = append(kept, fmt.Sprintf("role %q", owner))
	}
	if len(kept) > 0 {
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, "NotOwned", "Delete",
			"deletionPolicy is Delete, but %s were not created by this Database (no marker with its UID, or privileged): kept on the server", strings.Join(kept, " and "))
		return nil
	}
	r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "Dropped", "Delete",
		"Terminated connections, dropped database %q and role %q", dbName, owner)
	return nil
}

func verb(d *sqlv1alpha1.Database) string {
	if d.Spec.DeletionPolicy == sqlv1alpha1.DeletionDelete {
		return "dropped"
	}
	return "released (deletionPolicy Retain)"
}

func (r *Reconciler) removeFinalizer(ctx context.Context, d *sqlv1alpha1.Database) error {
	return creconcile.RemoveFinalizer(ctx, r.Client, d, sqlv1alpha1.DatabaseFinalizer)
}

func conditionMessage(d *sqlv1alpha1.Database, typ string) string {
	for _, c := range d.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}
