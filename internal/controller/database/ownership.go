package database

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
)

// claimOf is the marker this Database writes on what it creates.
func claimOf(d *sqlv1alpha1.Database) sqlengine.Claim {
	return sqlengine.Claim{UID: string(d.UID), Namespace: d.Namespace, Name: d.Name}
}

// owned is what checkOwnership observed, once every check passed.
type owned struct {
	role, database sqlengine.Ownership
}

// verdict is the decision about one existing object.
type verdict int

const (
	verdictMine    verdict = iota // marked by this Database, or missing
	verdictAdopt                  // unmarked (or retained by a deleted Database of the same name) and spec.adoptExisting
	verdictForeign                // someone else's
)

// judge decides about an object by its claim. recovered says an unmarked
// database is this Database's own by its owner role's claim (a crash
// between CREATE DATABASE and COMMENT); foreignRole that it belongs to
// another Database's role.
func judge(exists bool, found, mine sqlengine.Claim, adopt bool) verdict {
	switch {
	case found == mine:
		return verdictMine
	case !exists && found.IsZero():
		return verdictMine // will be created
	case adopt && (found.IsZero() || found.SameObjectName(mine)):
		return verdictAdopt
	default:
		return verdictForeign
	}
}

// checkOwnership refuses, before anything is written, a database or role
// this Database did not create, and any privileged role. It returns nil
// (with the status recorded on s) when provisioning must stop.
func (r *Reconciler) checkOwnership(ctx context.Context, s *scope, t *target) (*owned, ctrl.Result, error) {
	d, srv, mine := s.d, t.server, t.spec.Claim
	o := &owned{}
	var err error
	if o.role, err = srv.RoleOwnership(ctx, t.spec.Owner); err != nil {
		return stop(s.unavailable(err))
	}
	if o.database, err = srv.DatabaseOwnership(ctx, t.spec.Name); err != nil {
		return stop(s.unavailable(err))
	}
	// A privileged role is never ours to hand out, whoever marked it: a role
	// of ours altered to SUPERUSER out of band is refused too.
	if o.role.Exists {
		why, err := srv.PrivilegedRole(ctx, t.spec.Owner, t.admin.User)
		if err != nil {
			return stop(s.unavailable(err))
		}
		if why != "" {
			return stall(s, sqlv1alpha1.PrivilegedRoleReason, fmt.Sprintf(
				"spec.owner %q is a privileged role on the server (%s): Converge never resets its password nor hands it to a Database, even with adoptExisting; create a new Database with another owner",
				t.spec.Owner, why))
		}
	}
	roleVerdict := judge(o.role.Exists, o.role.Claim, mine, d.Spec.AdoptExisting)
	if roleVerdict == verdictForeign {
		return stall(s, sqlv1alpha1.RoleNotOwnedReason, foreignMessage("role", "spec.owner", t.spec.Owner, o.role.Claim, mine,
			"Converge never resets the password of, grants to or drops a role it did not create"))
	}
	dbClaim := o.database.Claim
	recovered := o.database.Exists && dbClaim.IsZero() && o.database.OwnerRoleClaim == mine
	if dbClaim.IsZero() && !o.database.OwnerRoleClaim.IsZero() {
		// Unmarked but owned by a Converge role: its Database crashed
		// before the COMMENT; it belongs to that Database.
		dbClaim = o.database.OwnerRoleClaim
	}
	dbVerdict := judge(o.database.Exists, dbClaim, mine, d.Spec.AdoptExisting)
	if dbVerdict == verdictForeign {
		return stall(s, sqlv1alpha1.DatabaseNotOwnedReason, foreignMessage("database", "spec.databaseName", t.spec.Name, dbClaim, mine,
			"Converge never alters, grants on or drops a database it did not create"))
	}
	// Every check passed: only now is anything written.
	if roleVerdict == verdictAdopt {
		if err := srv.MarkRole(ctx, t.spec.Owner, mine); err != nil {
			return stop(s.provisionFailed(err))
		}
		o.role.Claim = mine
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "Adopted", "Provision",
			"Adopted the existing role %q (spec.adoptExisting); it is managed by this Database from now on", t.spec.Owner)
	}
	if dbVerdict == verdictAdopt || recovered {
		if err := srv.MarkDatabase(ctx, t.spec.Name, mine); err != nil {
			return stop(s.provisionFailed(err))
		}
		o.database.Claim = mine
		if recovered {
			ctrl.LoggerFrom(ctx).Info("Marking a database created before a crash", "database", t.spec.Name)
		} else {
			r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "Adopted", "Provision",
				"Adopted the existing database %q (spec.adoptExisting); it is managed by this Database from now on", t.spec.Name)
		}
	}
	return o, ctrl.Result{}, nil
}

// foreignMessage says whose the object is and what the user can do.
func foreignMessage(what, field, name string, found, mine sqlengine.Claim, never string) string {
	if found.IsZero() {
		return fmt.Sprintf("%s %q already exists on the server and was not created by this Database; %s. Set spec.adoptExisting: true to take it over, or create a new Database with another %s",
			what, name, never, field)
	}
	if found.SameObjectName(mine) {
		return fmt.Sprintf("%s %q on the server was created by an earlier Database %s/%s (uid %s) that was deleted and retained it; %s. Set spec.adoptExisting: true to take it over, or create a new Database with another %s",
			what, name, found.Namespace, found.Name, found.UID, never, field)
	}
	return fmt.Sprintf("%s %q on the server belongs to Database %s/%s (uid %s), not to this one; %s. Create a new Database with another %s",
		what, name, found.Namespace, found.Name, found.UID, never, field)
}

// stall records a reason only the user can fix and stops retrying.
func stall(s *scope, reason, msg string) (*owned, ctrl.Result, error) {
	s.fail(reason, msg, true)
	return nil, ctrl.Result{}, reconcile.TerminalError(errors.New(msg))
}

func stop(res ctrl.Result, err error) (*owned, ctrl.Result, error) { return nil, res, err }
