// Package sqlinstance implements the PostgresInstance and MariaDBInstance
// controllers: one reconciler, run once per kind, that logs in to the server
// with the admin Secret, runs SELECT 1, reads the server version, and
// publishes the database instance contract in status (ready, endpoint,
// engine, version, adminSecretRef). It never creates anything on the server.
package sqlinstance

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/egress"
	"github.com/converge-dev/converge/internal/sqlengine"
	creconcile "github.com/converge-dev/converge/pkg/reconcile"
)

// Controller names, used with --controllers, in logs and metrics.
const (
	PostgresControllerName = "postgresinstance"
	MariaDBControllerName  = "mariadbinstance"
)

// FieldManager is the field manager of every write these controllers make.
const FieldManager = "converge-sqlinstance"

// DefaultHealthInterval is how often a Ready instance is checked again.
const DefaultHealthInterval = time.Minute

// adminSecretIndex indexes instances by spec.adminSecretRef.name.
const adminSecretIndex = "spec.adminSecretRef.name"

// +kubebuilder:rbac:groups=sql.converge.dev,resources=postgresinstances;mariadbinstances,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sql.converge.dev,resources=postgresinstances/status;mariadbinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Pinger logs in with a configuration, runs SELECT 1 and returns the server
// version; sqlengine.Ping is the real one.
type Pinger func(ctx context.Context, c sqlengine.Config) (string, error)

// Reconciler reconciles one instance kind.
type Reconciler struct {
	client.Client
	// Egress refuses instance hosts whose address the cluster admin
	// denies (internal/egress); nil refuses nothing.
	Egress *egress.Policy
	// Recorder emits Events; set by SetupWithManager.
	Recorder events.EventRecorder
	// Engine is the kind's engine: postgres or mariadb.
	Engine sqlv1alpha1.Engine
	// HealthInterval is how often a Ready instance is checked again;
	// DefaultHealthInterval when zero.
	HealthInterval time.Duration
	// Ping logs in; sqlengine.Ping when nil.
	Ping Pinger
	// IsAuthError tells refused credentials from an unreachable server;
	// sqlengine.IsAuthError when nil.
	IsAuthError func(error) bool
}

func (r *Reconciler) name() string {
	if r.Engine == sqlv1alpha1.EngineMariaDB {
		return MariaDBControllerName
	}
	return PostgresControllerName
}

func (r *Reconciler) newObject() sqlInstance {
	if r.Engine == sqlv1alpha1.EngineMariaDB {
		return &sqlv1alpha1.MariaDBInstance{}
	}
	return &sqlv1alpha1.PostgresInstance{}
}

func (r *Reconciler) newList() client.ObjectList {
	if r.Engine == sqlv1alpha1.EngineMariaDB {
		return &sqlv1alpha1.MariaDBInstanceList{}
	}
	return &sqlv1alpha1.PostgresInstanceList{}
}

// sqlInstance is a built-in instance as a client.Object.
type sqlInstance interface {
	client.Object
	sqlv1alpha1.Instance
}

// SetupWithManager registers the controller for r.Engine's kind.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Client = mgr.GetClient()
	r.Recorder = mgr.GetEventRecorder(r.name())
	if r.HealthInterval == 0 {
		r.HealthInterval = DefaultHealthInterval
	}
	if r.Ping == nil {
		r.Ping = sqlengine.Ping
	}
	if r.IsAuthError == nil {
		r.IsAuthError = sqlengine.IsAuthError
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), r.newObject(), adminSecretIndex, //nolint:forbidigo // index registration has no request context
		func(o client.Object) []string {
			return []string{o.(sqlInstance).InstanceSpec().AdminSecretRef.Name}
		}); err != nil {
		return fmt.Errorf("indexing %s: %w", adminSecretIndex, err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.name()).
		For(r.newObject()).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.instancesForSecret)).
		Complete(r)
}

// instancesForSecret queues the instances whose admin Secret changed.
func (r *Reconciler) instancesForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	list := r.newList()
	if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{adminSecretIndex: o.GetName()}); err != nil {
		return nil
	}
	var out []reconcile.Request
	_ = forEach(list, func(obj client.Object) {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	})
	return out
}

func forEach(list client.ObjectList, f func(client.Object)) error {
	switch l := list.(type) {
	case *sqlv1alpha1.PostgresInstanceList:
		for i := range l.Items {
			f(&l.Items[i])
		}
	case *sqlv1alpha1.MariaDBInstanceList:
		for i := range l.Items {
			f(&l.Items[i])
		}
	default:
		return fmt.Errorf("unexpected list %T", list)
	}
	return nil
}

// Reconcile checks one instance and publishes the contract.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	inst := r.newObject()
	if err := r.Get(ctx, req.NamespacedName, inst); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !inst.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil // nothing on the server belongs to the instance object
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues(string(r.Engine)+"Instance", klog.KObj(inst)))
	s := &scope{inst: inst, engine: r.Engine}
	wasReady := inst.InstanceStatus().Ready
	patcher := creconcile.NewStatusPatcher(r.Client, inst)
	defer func() {
		computeStatus(s)
		// A terminal error (Stalled) has observed this generation too, so
		// that kstatus reads it Failed rather than InProgress; so has a
		// retried failure the status reports (Unreachable): kstatus reads
		// InProgress with its reason, not a lagging generation.
		if retErr == nil || errors.Is(retErr, reconcile.TerminalError(nil)) || s.reason != "" {
			inst.InstanceStatus().ObservedGeneration = inst.GetGeneration()
		}
		st := inst.InstanceStatus()
		if wasReady != st.Ready {
			reason, msg := "Ready", "logged in to "+string(r.Engine)+" "+st.Version
			typ := corev1.EventTypeNormal
			if !st.Ready {
				reason, msg, typ = s.reason, s.message, corev1.EventTypeWarning
			}
			r.Recorder.Eventf(inst, nil, typ, reason, "Check", "%s", msg)
		}
		// An unchanged status is not sent.
		if err := patcher.Patch(ctx, inst); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	return r.check(ctx, s)
}

// check logs in and records the outcome on the scope.
func (r *Reconciler) check(ctx context.Context, s *scope) (ctrl.Result, error) {
	spec := s.inst.InstanceSpec()
	s.port = int(spec.Port)
	if s.port == 0 {
		s.port = DefaultPort(r.Engine)
	}
	cfg := sqlengine.Config{Engine: sqlengine.Engine(r.Engine), Host: spec.Host, Port: s.port, MaxConns: 1, TLSMode: sqlengine.TLSRequire, Egress: r.Egress}
	if spec.TLS != nil && spec.TLS.Mode != "" {
		cfg.TLSMode = sqlengine.TLSMode(spec.TLS.Mode)
		if spec.TLS.Mode == sqlv1alpha1.TLSVerifyFull {
			if spec.TLS.CASecretRef == nil {
				s.fail(sqlv1alpha1.InvalidSpecReason, "tls.mode VerifyFull needs tls.caSecretRef", true)
				return ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
			}
			ca := &corev1.Secret{}
			if err := r.Get(ctx, types.NamespacedName{Namespace: s.inst.GetNamespace(), Name: spec.TLS.CASecretRef.Name}, ca); err != nil {
				s.fail(sqlv1alpha1.InvalidSpecReason, fmt.Sprintf("reading the CA Secret %q: %v", spec.TLS.CASecretRef.Name, err), true)
				return ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
			}
			cfg.CAPEM = ca.Data["ca.crt"]
		}
	}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.inst.GetNamespace(), Name: spec.AdminSecretRef.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			s.fail(sqlv1alpha1.AdminSecretInvalidReason, fmt.Sprintf("the admin Secret %q does not exist", spec.AdminSecretRef.Name), true)
			return ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
		}
		return ctrl.Result{}, fmt.Errorf("reading the admin Secret: %w", err)
	}
	cfg.User, cfg.Password = string(sec.Data["username"]), string(sec.Data["password"])
	if cfg.User == "" || cfg.Password == "" {
		s.fail(sqlv1alpha1.AdminSecretInvalidReason, fmt.Sprintf("the admin Secret %q needs the keys username and password", spec.AdminSecretRef.Name), true)
		return ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
	}
	version, err := r.Ping(ctx, cfg)
	switch {
	case egress.Denial(err) != nil:
		s.fail(sqlv1alpha1.HostNotAllowedReason, fmt.Sprintf("spec.host %s: %v", cfg.Host, egress.Denial(err)), true)
		return ctrl.Result{RequeueAfter: r.HealthInterval}, nil
	case err != nil && r.IsAuthError(err):
		s.fail(sqlv1alpha1.AuthenticationFailedReason, fmt.Sprintf("the server refused the admin credentials in Secret %q: %v", spec.AdminSecretRef.Name, err), true)
		return ctrl.Result{}, reconcile.TerminalError(errors.New(s.message))
	case err != nil && sqlengine.IsTLSUnavailable(err):
		// Stalled (someone must act), but checked again every interval: the
		// fix is on the server, which no watch sees.
		s.fail(sqlv1alpha1.TLSUnavailableReason, fmt.Sprintf("tls.mode is %s but the server at %s:%d offers no TLS: enable TLS on the server, or set tls.mode: Disable explicitly if the network to it is trusted",
			cfg.TLSMode, cfg.Host, cfg.Port), true)
		return ctrl.Result{RequeueAfter: r.HealthInterval}, nil
	case err != nil && sqlengine.IsTLSVerifyError(err):
		caName := ""
		if spec.TLS != nil && spec.TLS.CASecretRef != nil {
			caName = spec.TLS.CASecretRef.Name
		}
		s.fail(sqlv1alpha1.TLSVerificationFailedReason, fmt.Sprintf("the certificate of the server at %s:%d did not verify against the CA in Secret %q (tls.mode VerifyFull): %v",
			cfg.Host, cfg.Port, caName, err), true)
		return ctrl.Result{RequeueAfter: r.HealthInterval}, nil
	case err != nil:
		s.fail(sqlv1alpha1.UnreachableReason, fmt.Sprintf("cannot reach %s: %v", cfg.Host, err), false)
		return ctrl.Result{}, fmt.Errorf("checking %s: %w", cfg.Host, err)
	}
	s.ready, s.version = true, version
	return ctrl.Result{RequeueAfter: r.HealthInterval}, nil
}

// DefaultPort is the engine's well-known port.
func DefaultPort(e sqlv1alpha1.Engine) int {
	if e == sqlv1alpha1.EngineMariaDB {
		return 3306
	}
	return 5432
}
