package database

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	backupv1alpha1 "github.com/converge-dev/converge/api/backup/v1alpha1"
	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/secretcache"
	"github.com/converge-dev/converge/internal/sqlengine"
	pcontract "github.com/converge-dev/converge/pkg/contract"
	"github.com/converge-dev/converge/pkg/contract/databaseinstance"
)

// instanceRetry is how soon a Database waiting for its instance looks again
// (the instance watch usually wakes it earlier).
const instanceRetry = 15 * time.Second

// target is everything needed to act on the server for one Database.
type target struct {
	contract databaseinstance.Status
	admin    sqlengine.Config
	server   Server
	spec     sqlengine.Spec
}

// resolveNames fills the database and owner names (the webhook defaults
// them; the controller does not rely on it).
func resolveNames(d *sqlv1alpha1.Database) (dbName, owner string) {
	dbName = d.Spec.DatabaseName
	if dbName == "" {
		dbName = d.Name
	}
	owner = d.Spec.Owner
	if owner == "" {
		owner = DefaultOwner(dbName)
	}
	return dbName, owner
}

// DefaultOwner derives the owner role from the database name.
func DefaultOwner(dbName string) string {
	const suffix = "_owner"
	if len(dbName) > sqlengine.MaxIdentifierLength-len(suffix) {
		dbName = dbName[:sqlengine.MaxIdentifierLength-len(suffix)]
	}
	return dbName + suffix
}

// ConnectionSecretName is the connection Secret's name.
func ConnectionSecretName(d *sqlv1alpha1.Database) string {
	if d.Spec.ConnectionSecret != "" {
		return d.Spec.ConnectionSecret
	}
	return d.Name + "-connection"
}

// resolveTarget reads the instance through the contract and connects as its
// admin. A nil target with a nil error means "wait" (recorded on s).
func (r *Reconciler) resolveTarget(ctx context.Context, s *scope) (*target, ctrl.Result, error) {
	d := s.d
	dbName, owner := resolveNames(d)
	s.dbName, s.owner = dbName, owner
	for what, id := range map[string]string{"databaseName": dbName, "owner": owner} {
		if err := sqlengine.ValidateIdentifier(id); err != nil {
			s.fail(sqlv1alpha1.InvalidSpecReason, fmt.Sprintf("%s %q: %v", what, id, err), true)
			return nil, ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
		}
	}
	gv, err := schema.ParseGroupVersion(d.Spec.InstanceRef.APIVersion)
	if err != nil {
		s.fail(sqlv1alpha1.InvalidSpecReason, fmt.Sprintf("instanceRef.apiVersion: %v", err), true)
		return nil, ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
	}
	gvk := gv.WithKind(d.Spec.InstanceRef.Kind)
	// Only a kind declaring the contract is read or watched: a core kind
	// (Secret) or another foreign kind would be cached cluster-wide on the
	// tenant's word.
	if err := r.Contracts.Check(ctx, gvk, pcontract.DatabaseInstance); err != nil {
		if pcontract.IsNotDeclared(err) {
			s.fail(sqlv1alpha1.InstanceContractNotDeclaredReason, "spec.instanceRef.kind: "+err.Error()+"; nothing of it is read or watched", true)
			return nil, ctrl.Result{RequeueAfter: instanceRetry}, nil
		}
		return nil, ctrl.Result{}, fmt.Errorf("checking the contract of %s: %w", gvk, err)
	}
	if err := r.instances.Watch(gvk); err != nil {
		s.fail(sqlv1alpha1.InstanceNotFoundReason, fmt.Sprintf("cannot watch %s (is the CRD installed, and may the manager list it?): %v", gvk, err), false)
		return nil, ctrl.Result{RequeueAfter: instanceRetry}, nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := r.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: d.Spec.InstanceRef.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			s.fail(sqlv1alpha1.InstanceNotFoundReason, fmt.Sprintf("%s %q does not exist", gvk.Kind, d.Spec.InstanceRef.Name), false)
			return nil, ctrl.Result{RequeueAfter: instanceRetry}, nil
		}
		s.fail(sqlv1alpha1.InstanceNotFoundReason, fmt.Sprintf("reading %s %q: %v", gvk.Kind, d.Spec.InstanceRef.Name, err), false)
		return nil, ctrl.Result{}, fmt.Errorf("reading the instance: %w", err)
	}
	st, err := databaseinstance.Read(u)
	if err != nil {
		s.fail(sqlv1alpha1.ContractViolationReason, fmt.Sprintf("%s %q: %v", gvk.Kind, u.GetName(), err), true)
		return nil, ctrl.Result{RequeueAfter: instanceRetry}, nil
	}
	if !st.Ready {
		msg := fmt.Sprintf("waiting for %s %q to be ready", gvk.Kind, u.GetName())
		if st.Stale {
			msg += " (it has not yet checked its latest spec)"
		}
		s.fail(sqlv1alpha1.InstanceNotReadyReason, msg, false)
		return nil, ctrl.Result{RequeueAfter: instanceRetry}, nil
	}
	s.engine = st.Engine
	if len(d.Spec.Extensions) > 0 && st.Engine != string(sqlv1alpha1.EnginePostgres) {
		s.fail(sqlv1alpha1.UnsupportedReason, fmt.Sprintf("extensions are a PostgreSQL feature; %s %q is %s", gvk.Kind, u.GetName(), st.Engine), true)
		return nil, ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
	}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: st.AdminSecretName}, sec); err != nil {
		s.fail(sqlv1alpha1.InstanceUnavailableReason, fmt.Sprintf("reading the admin Secret %q of %s %q: %v", st.AdminSecretName, gvk.Kind, u.GetName(), err), false)
		return nil, ctrl.Result{}, fmt.Errorf("reading the admin Secret: %w", err)
	}
	maxConns, _, _ := unstructured.NestedInt64(u.Object, "spec", "maxConnections")
	t := &target{contract: st, spec: sqlengine.Spec{Name: dbName, Owner: owner, Charset: d.Spec.Charset, Extensions: d.Spec.Extensions, Claim: claimOf(d)}}
	t.admin = sqlengine.Config{Engine: sqlengine.Engine(st.Engine), Host: st.Host, Port: st.Port,
		User: string(sec.Data[databaseinstance.UsernameKey]), Password: string(sec.Data[databaseinstance.PasswordKey]), MaxConns: int(maxConns),
		Egress: r.Egress}
	t.admin.TLSMode = sqlengine.TLSRequire // the default when an instance kind says nothing
	if mode, _, _ := unstructured.NestedString(u.Object, "spec", "tls", "mode"); mode != "" {
		t.admin.TLSMode = sqlengine.TLSMode(mode)
	}
	if caName, _, _ := unstructured.NestedString(u.Object, "spec", "tls", "caSecretRef", "name"); caName != "" {
		ca := &corev1.Secret{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: caName}, ca); err != nil {
			s.fail(sqlv1alpha1.InstanceUnavailableReason, fmt.Sprintf("reading the CA Secret %q of %s %q: %v", caName, gvk.Kind, u.GetName(), err), false)
			return nil, ctrl.Result{}, fmt.Errorf("reading the CA Secret: %w", err)
		}
		t.admin.CAPEM = ca.Data["ca.crt"]
	}
	if t.spec.Charset == "" {
		t.spec.Charset = "UTF8"
		if st.Engine == string(sqlv1alpha1.EngineMariaDB) {
			t.spec.Charset = "utf8mb4"
		}
	}
	t.server, err = r.Engines.Admin(t.admin)
	if err == nil {
		err = t.server.Alive(ctx)
	}
	if denied := egress.Denial(err); denied != nil {
		// An instance provider published a host the admin denies: Stalled
		// until it or the manager's flags change (checked every resync).
		s.fail(sqlv1alpha1.HostNotAllowedReason, fmt.Sprintf("%s %q at %s: %v", gvk.Kind, u.GetName(), net.JoinHostPort(st.Host, strconv.Itoa(st.Port)), denied), true)
		return nil, ctrl.Result{RequeueAfter: r.ResyncInterval}, nil
	}
	if err != nil {
		s.fail(sqlv1alpha1.InstanceUnavailableReason, fmt.Sprintf("%s %q at %s: %v", gvk.Kind, u.GetName(), net.JoinHostPort(st.Host, strconv.Itoa(st.Port)), err), false)
		return nil, ctrl.Result{}, fmt.Errorf("connecting to the instance: %w", err)
	}
	return t, ctrl.Result{}, nil
}

// reconcileNormal provisions the database, or observes it and corrects
// drift.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	t, res, err := r.resolveTarget(ctx, s)
	if t == nil {
		return res, err
	}
	d := s.d
	r.observers.remember(d, t.admin)
	// 1. Nothing is touched that this Database did not create (or adopt).
	own, res, err := r.checkOwnership(ctx, s, t)
	if own == nil {
		return res, err
	}
	// 2. The password lives in the connection Secret before the role exists,
	// so a crash never loses it.
	password, err := r.ensureSecretPassword(ctx, s, t)
	if err != nil {
		return s.provisionFailed(err)
	}
	srv := t.server
	// 3. The owner role, created and marked at once.
	exists := own.role.Exists
	if !exists {
		if err := srv.CreateRole(ctx, t.spec.Owner, password, t.spec.Claim); err != nil {
			return s.provisionFailed(err)
		}
		if s.provisioned() {
			s.corrected(sqlv1alpha1.DriftRoleRecreated, fmt.Sprintf("role %q was missing and was created again", t.spec.Owner))
		}
	}
	// 4. The database, created and marked.
	info := sqlengine.DatabaseInfo{Exists: own.database.Exists}
	created := false
	if !info.Exists {
		if err := srv.CreateDatabase(ctx, t.spec); err != nil {
			return s.provisionFailed(err)
		}
		created = true
		if s.provisioned() {
			msg := fmt.Sprintf("database %q was missing on the server and was recreated empty; %s", t.spec.Name, r.restoreHint(ctx, d))
			s.corrected(sqlv1alpha1.DriftDatabaseRecreated, msg)
			r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, sqlv1alpha1.DriftDatabaseRecreated, "Observe", "%s", msg)
		}
	}
	// 5. Extensions and privileges.
	if err := srv.EnsureExtensions(ctx, t.spec); err != nil {
		return s.provisionFailed(err)
	}
	var missing []string
	if created {
		missing = []string{"ALL"} // a new database: grant without asking
	} else if missing, err = srv.MissingPrivileges(ctx, t.spec); err != nil {
		return s.unavailable(err)
	}
	if len(missing) > 0 {
		if err := srv.Grant(ctx, t.spec); err != nil {
			return s.provisionFailed(err)
		}
		if s.provisioned() && !created {
			msg := fmt.Sprintf("role %q lacked %s on %q; granted again", t.spec.Owner, strings.Join(missing, ", "), t.spec.Name)
			s.corrected(sqlv1alpha1.DriftPrivilegesGranted, msg)
			r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, sqlv1alpha1.DriftPrivilegesGranted, "Observe", "%s", msg)
		}
	}
	// 6. Ready only after the owner logs in with the Secret's credentials.
	login := t.admin
	login.User, login.Password, login.Database, login.MaxConns = t.spec.Owner, password, t.spec.Name, 1
	if loginErr := r.Engines.CheckLogin(ctx, login); loginErr != nil {
		if !r.Engines.IsAuthError(loginErr) {
			return s.unavailable(loginErr)
		}
		if err := srv.SetPassword(ctx, t.spec.Owner, password); err != nil {
			return s.provisionFailed(err)
		}
		if err := r.Engines.CheckLogin(ctx, login); err != nil {
			s.fail(sqlv1alpha1.LoginFailedReason, fmt.Sprintf("role %q cannot log in to %q even after its password was reset: %v", t.spec.Owner, t.spec.Name, err), false)
			return ctrl.Result{}, fmt.Errorf("logging in as the owner: %w", err)
		}
		if s.provisioned() && exists {
			msg := fmt.Sprintf("role %q could not log in with the password in Secret %q (%v); the password was reset and login allowed", t.spec.Owner, ConnectionSecretName(d), loginErr)
			s.corrected(sqlv1alpha1.DriftPasswordReset, msg)
			r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, sqlv1alpha1.DriftPasswordReset, "Observe", "%s", msg)
		}
	}
	// 7. Restore, once, into the new database.
	if d.Spec.RestoreFrom != nil && d.Status.RestoredFrom == "" {
		if res, err := r.restore(ctx, s, t, login); err != nil || !res.IsZero() {
			return res, err
		}
	}
	// 8. Observe for status.
	if info, err = srv.Database(ctx, t.spec.Name); err != nil {
		return s.unavailable(err)
	}
	if !info.Exists {
		// Dropped while this observation ran: look again at once, so the
		// next run treats it as drift.
		s.fail(sqlv1alpha1.ProvisioningReason, fmt.Sprintf("database %q disappeared during the observation; observing again", t.spec.Name), false)
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	s.available = true
	now := metav1.NewTime(s.now)
	s.atProvider = &sqlv1alpha1.AtProvider{Exists: info.Exists, Owner: info.Owner, SizeBytes: info.SizeBytes, ObservedTime: &now}
	if t.contract.Engine == string(sqlv1alpha1.EngineMariaDB) {
		s.atProvider.Owner = t.spec.Owner // MariaDB has no database owner; the grantee is reported
	}
	if !s.provisioned() {
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, sqlv1alpha1.AvailableReason, "Provision",
			"Database %q and role %q are ready on %s %q", t.spec.Name, t.spec.Owner, d.Spec.InstanceRef.Kind, d.Spec.InstanceRef.Name)
	}
	// The instance's observer looks for drift every ObserveInterval; a
	// full reconcile comes every ResyncInterval.
	return ctrl.Result{RequeueAfter: resyncAfter(r.ResyncInterval)}, nil
}

// ensureSecretPassword returns the owner's password from the connection
// Secret, writing the Secret (with a new password if it has none) first.
func (r *Reconciler) ensureSecretPassword(ctx context.Context, s *scope, t *target) (string, error) {
	d := s.d
	sec := &corev1.Secret{}
	key := types.NamespacedName{Namespace: d.Namespace, Name: ConnectionSecretName(d)}
	err := r.Get(ctx, key, sec)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("reading the connection Secret: %w", err)
	}
	exists := err == nil
	if exists && !metav1.IsControlledBy(sec, d) {
		return "", fmt.Errorf("the Secret %q exists and is not controlled by this Database; choose another spec.connectionSecret", key.Name)
	}
	password := string(sec.Data["password"])
	if password == "" {
		if password, err = generatePassword(); err != nil {
			return "", err
		}
	}
	want := map[string][]byte{
		"host": []byte(t.contract.Host), "port": []byte(strconv.Itoa(t.contract.Port)),
		"database": []byte(t.spec.Name), "username": []byte(t.spec.Owner), "password": []byte(password),
		"uri": []byte(connectionURI(t.contract.Engine, t.contract.Host, t.contract.Port, t.spec.Owner, password, t.spec.Name)),
	}
	if !exists {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{sqlv1alpha1.DatabaseLabel: d.Name, secretcache.Label: "true"}}, Type: corev1.SecretTypeOpaque, Data: want}
		if err := controllerutil.SetControllerReference(d, sec, r.Scheme()); err != nil {
			return "", err
		}
		if err := r.Create(ctx, sec, client.FieldOwner(FieldManager)); err != nil {
			return "", fmt.Errorf("creating the connection Secret: %w", err)
		}
		return password, nil
	}
	same := len(sec.Data) == len(want)
	for k, v := range want {
		if string(sec.Data[k]) != string(v) {
			same = false
		}
	}
	if !same {
		base := sec.DeepCopy()
		sec.Data = want
		if err := r.Patch(ctx, sec, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
			return "", fmt.Errorf("updating the connection Secret: %w", err)
		}
	}
	return password, nil
}

// connectionURI is the URI applications use, the same shape for every
// engine: scheme://user:password@host:port/database.
func connectionURI(engine, host string, port int, user, password, db string) string {
	scheme := "postgresql"
	if engine == string(sqlv1alpha1.EngineMariaDB) {
		scheme = "mysql"
	}
	u := url.URL{Scheme: scheme, User: url.UserPassword(user, password), Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: "/" + db}
	return u.String()
}

const passwordAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// generatePassword returns 32 random alphanumerics (190 bits), which need no
// quoting in any client or URI.
func generatePassword() (string, error) {
	b := make([]byte, 32)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(passwordAlphabet))))
		if err != nil {
			return "", fmt.Errorf("generating a password: %w", err)
		}
		b[i] = passwordAlphabet[n.Int64()]
	}
	return string(b), nil
}

// restoreHint names the newest completed DatabaseBackup of this Database,
// for the message that says it was recreated empty.
func (r *Reconciler) restoreHint(ctx context.Context, d *sqlv1alpha1.Database) string {
	list := &backupv1alpha1.DatabaseBackupList{}
	if err := r.List(ctx, list, client.InNamespace(d.Namespace)); err != nil {
		return "list DatabaseBackups to find one to restore from"
	}
	dbName, _ := resolveNames(d)
	var newest *backupv1alpha1.DatabaseBackup
	for i := range list.Items {
		b := &list.Items[i]
		if b.Status.Phase != backupv1alpha1.BackupCompleted || (b.Spec.DatabaseRef.Name != d.Name && b.Spec.DatabaseRef.DatabaseName != dbName) {
			continue
		}
		if newest == nil || b.Status.CompletionTime != nil && newest.Status.CompletionTime != nil && newest.Status.CompletionTime.Before(b.Status.CompletionTime) {
			newest = b
		}
	}
	if newest == nil {
		return "no DatabaseBackup of it exists to restore from"
	}
	return fmt.Sprintf("it can be restored from DatabaseBackup %q (a new Database with spec.restoreFrom.name: %s)", newest.Name, newest.Name)
}

// restore loads spec.restoreFrom into the new database, as the owner.
func (r *Reconciler) restore(ctx context.Context, s *scope, t *target, login sqlengine.Config) (ctrl.Result, error) {
	d := s.d
	name := d.Spec.RestoreFrom.Name
	b := &backupv1alpha1.DatabaseBackup{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			s.fail(sqlv1alpha1.RestoreFailedReason, fmt.Sprintf("DatabaseBackup %q does not exist", name), false)
			return ctrl.Result{RequeueAfter: instanceRetry}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading DatabaseBackup %q: %w", name, err)
	}
	switch {
	case b.Status.Phase != backupv1alpha1.BackupCompleted:
		s.fail(sqlv1alpha1.RestoreFailedReason, fmt.Sprintf("DatabaseBackup %q is %q, not Completed", name, b.Status.Phase), false)
		return ctrl.Result{RequeueAfter: instanceRetry}, nil
	case b.Status.Engine != t.contract.Engine:
		s.fail(sqlv1alpha1.RestoreFailedReason, fmt.Sprintf("DatabaseBackup %q is a %s dump; this database is on %s", name, b.Status.Engine, t.contract.Engine), true)
		return ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
	case !filepath.IsLocal(b.Status.Location) || r.BackupDir == "":
		s.fail(sqlv1alpha1.RestoreFailedReason, fmt.Sprintf("DatabaseBackup %q location %q is not in this manager's backup store %q", name, b.Status.Location, r.BackupDir), true)
		return ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
	}
	// The cache may not have seen the status write of the run that restored:
	// ask the API server before loading anything twice.
	fresh := &sqlv1alpha1.Database{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(d), fresh); err != nil {
		return ctrl.Result{}, fmt.Errorf("re-reading the Database: %w", err)
	}
	if fresh.Status.RestoredFrom != "" {
		d.Status.RestoredFrom = fresh.Status.RestoredFrom
		return ctrl.Result{}, nil
	}
	hasTables, err := t.server.HasTables(ctx, withDB(t.admin, t.spec.Name))
	if err != nil {
		return s.unavailable(err)
	}
	if hasTables {
		s.fail(sqlv1alpha1.RestoreFailedReason, fmt.Sprintf("database %q already holds tables; restoreFrom loads only into a new, empty database", t.spec.Name), true)
		return ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
	}
	ctrl.LoggerFrom(ctx).Info("Restoring database", "DatabaseBackup", name, "location", b.Status.Location)
	if err := r.Engines.Restore(ctx, login, t.contract.Version, filepath.Join(r.BackupDir, b.Status.Location), b.Status.SHA256); err != nil {
		s.fail(sqlv1alpha1.RestoreFailedReason, fmt.Sprintf("loading DatabaseBackup %q: %v", name, err), false)
		return ctrl.Result{}, fmt.Errorf("restoring: %w", err)
	}
	d.Status.RestoredFrom = name
	r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "Restored", "Restore", "Loaded DatabaseBackup %q (sha256 %s) into %q", name, b.Status.SHA256, t.spec.Name)
	return ctrl.Result{}, nil
}

func withDB(c sqlengine.Config, db string) sqlengine.Config {
	c.Database, c.MaxConns = db, 1
	return c
}
