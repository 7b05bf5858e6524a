// Package sql holds the admission webhooks (defaulting and validation) of the
// sql.converge.dev API group: identifiers are checked here, before anything
// reaches a server, with messages that say what is wrong.
package sql

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	sqlv1alpha1 "github.com/converge-dev/converge/api/sql/v1alpha1"
	"github.com/converge-dev/converge/internal/sqlengine"
	"github.com/converge-dev/converge/internal/webhook/specerr"
	pcontract "github.com/converge-dev/converge/pkg/contract"
)

// +kubebuilder:webhook:path=/mutate-sql-converge-dev-v1alpha1-database,mutating=true,failurePolicy=fail,sideEffects=None,groups=sql.converge.dev,resources=databases,verbs=create;update,versions=v1alpha1,name=mdatabase.sql.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-sql-converge-dev-v1alpha1-database,mutating=false,failurePolicy=fail,sideEffects=None,groups=sql.converge.dev,resources=databases,verbs=create;update,versions=v1alpha1,name=vdatabase.sql.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Database defaults and validates Databases.
type Database struct {
	// Contracts answers, from the manager's cache, whether the kind of
	// spec.instanceRef declares the database-instance contract;
	// SetupWithManager fills it.
	Contracts pcontract.Checker
}

// SetupWithManager registers the webhooks with the manager's webhook server.
func (w Database) SetupWithManager(mgr ctrl.Manager) error {
	w.Contracts = pcontract.Checker{Reader: mgr.GetCache(), Mapper: mgr.GetRESTMapper()}
	return ctrl.NewWebhookManagedBy(mgr, &sqlv1alpha1.Database{}).WithDefaulter(w).WithValidator(w).Complete()
}

// Default fills databaseName (metadata.name), owner (databaseName_owner),
// deletionPolicy (Retain) and connectionSecret (<name>-connection).
func (Database) Default(_ context.Context, d *sqlv1alpha1.Database) error {
	if d.Spec.DatabaseName == "" && sqlengine.ValidateIdentifier(d.Name) == nil {
		d.Spec.DatabaseName = d.Name // otherwise validation asks for one
	}
	if d.Spec.Owner == "" && sqlengine.ValidateIdentifier(d.Spec.DatabaseName) == nil {
		d.Spec.Owner = defaultOwner(d.Spec.DatabaseName)
	}
	if d.Spec.DeletionPolicy == "" {
		d.Spec.DeletionPolicy = sqlv1alpha1.DeletionRetain
	}
	if d.Spec.ConnectionSecret == "" && d.Name != "" {
		d.Spec.ConnectionSecret = d.Name + "-connection"
	}
	return nil
}

// defaultOwner matches the controller's database.DefaultOwner.
func defaultOwner(db string) string {
	const suffix = "_owner"
	if len(db) > sqlengine.MaxIdentifierLength-len(suffix) {
		db = db[:sqlengine.MaxIdentifierLength-len(suffix)]
	}
	return db + suffix
}

// ValidateCreate checks a new Database; its instanceRef must name a kind
// declaring the database-instance contract (checked once: the reference is
// immutable).
func (w Database) ValidateCreate(ctx context.Context, d *sqlv1alpha1.Database) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := ValidateDatabaseSpec(d.Name, &d.Spec, p)
	if len(errs) == 0 {
		ref := d.Spec.InstanceRef
		gv, _ := schema.ParseGroupVersion(ref.APIVersion) // ValidateDatabaseSpec parsed it
		if err := w.Contracts.Check(ctx, gv.WithKind(ref.Kind), pcontract.DatabaseInstance); err != nil {
			if !pcontract.IsNotDeclared(err) {
				return nil, apierrors.NewInternalError(err)
			}
			errs = append(errs, field.Invalid(p.Child("instanceRef", "kind"), ref.Kind, err.Error()+
				" (an instance kind's CRD declares it with the label "+pcontract.Label(pcontract.DatabaseInstance)+"="+pcontract.Version+")"))
		}
	}
	return nil, specerr.Invalid(sqlv1alpha1.GroupVersion, "Database", d.Name, errs)
}

// ValidateUpdate checks a change; the server-facing identity is immutable.
func (Database) ValidateUpdate(_ context.Context, old, d *sqlv1alpha1.Database) (admission.Warnings, error) {
	if apiequality.Semantic.DeepEqual(old.Spec, d.Spec) {
		return nil, nil // metadata-only changes (finalizers, annotations) are never refused
	}
	p := field.NewPath("spec")
	errs := ValidateDatabaseSpec(d.Name, &d.Spec, p)
	immutable := func(name string, a, b any) {
		if !apiequality.Semantic.DeepEqual(a, b) {
			errs = append(errs, field.Invalid(p.Child(name), b, "field is immutable (create a new Database instead)"))
		}
	}
	immutable("instanceRef", old.Spec.InstanceRef, d.Spec.InstanceRef)
	immutable("databaseName", old.Spec.DatabaseName, d.Spec.DatabaseName)
	immutable("owner", old.Spec.Owner, d.Spec.Owner)
	immutable("charset", old.Spec.Charset, d.Spec.Charset)
	immutable("restoreFrom", old.Spec.RestoreFrom, d.Spec.RestoreFrom)
	return nil, specerr.Invalid(sqlv1alpha1.GroupVersion, "Database", d.Name, errs)
}

// ValidateDelete allows every deletion.
func (Database) ValidateDelete(context.Context, *sqlv1alpha1.Database) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDatabaseSpec checks what the schema cannot: identifiers that are
// safe on every engine, a parsable instanceRef, no extensions for MariaDB.
func ValidateDatabaseSpec(name string, spec *sqlv1alpha1.DatabaseSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	dbName := spec.DatabaseName
	if dbName == "" {
		dbName = name
	}
	if err := sqlengine.ValidateIdentifier(dbName); err != nil {
		fp := p.Child("databaseName")
		msg := err.Error()
		if spec.DatabaseName == "" {
			msg = "defaults to metadata.name, which " + msg + "; set spec.databaseName"
		}
		errs = append(errs, field.Invalid(fp, dbName, msg))
	}
	if spec.Owner != "" {
		if err := sqlengine.ValidateIdentifier(spec.Owner); err != nil {
			errs = append(errs, field.Invalid(p.Child("owner"), spec.Owner, err.Error()))
		}
	}
	if spec.Charset != "" {
		if err := sqlengine.ValidateCharset(spec.Charset); err != nil {
			errs = append(errs, field.Invalid(p.Child("charset"), spec.Charset, err.Error()))
		}
	}
	for i, e := range spec.Extensions {
		if err := sqlengine.ValidateIdentifier(e); err != nil {
			errs = append(errs, field.Invalid(p.Child("extensions").Index(i), e, err.Error()))
		}
	}
	ref := p.Child("instanceRef")
	gv, err := schema.ParseGroupVersion(spec.InstanceRef.APIVersion)
	builtIn := err == nil && gv.Group == sqlv1alpha1.GroupVersion.Group
	switch {
	case err != nil || gv.Version == "":
		errs = append(errs, field.Invalid(ref.Child("apiVersion"), spec.InstanceRef.APIVersion, "must be group/version, for example sql.converge.dev/v1alpha1"))
	case builtIn && spec.InstanceRef.Kind == "MariaDBInstance" && len(spec.Extensions) > 0:
		errs = append(errs, field.Forbidden(p.Child("extensions"), "extensions are a PostgreSQL feature; MariaDB has none"))
	case builtIn && spec.InstanceRef.Kind != "PostgresInstance" && spec.InstanceRef.Kind != "MariaDBInstance":
		errs = append(errs, field.NotSupported(ref.Child("kind"), spec.InstanceRef.Kind, []string{"PostgresInstance", "MariaDBInstance"}))
	}
	for _, m := range validation.IsDNS1123Subdomain(spec.InstanceRef.Name) {
		errs = append(errs, field.Invalid(ref.Child("name"), spec.InstanceRef.Name, m))
	}
	if spec.ConnectionSecret != "" {
		for _, m := range validation.IsDNS1123Subdomain(spec.ConnectionSecret) {
			errs = append(errs, field.Invalid(p.Child("connectionSecret"), spec.ConnectionSecret, m))
		}
	}
	return errs
}

// +kubebuilder:webhook:path=/mutate-sql-converge-dev-v1alpha1-postgresinstance,mutating=true,failurePolicy=fail,sideEffects=None,groups=sql.converge.dev,resources=postgresinstances,verbs=create;update,versions=v1alpha1,name=mpostgresinstance.sql.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-sql-converge-dev-v1alpha1-postgresinstance,mutating=false,failurePolicy=fail,sideEffects=None,groups=sql.converge.dev,resources=postgresinstances,verbs=create;update,versions=v1alpha1,name=vpostgresinstance.sql.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/mutate-sql-converge-dev-v1alpha1-mariadbinstance,mutating=true,failurePolicy=fail,sideEffects=None,groups=sql.converge.dev,resources=mariadbinstances,verbs=create;update,versions=v1alpha1,name=mmariadbinstance.sql.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-sql-converge-dev-v1alpha1-mariadbinstance,mutating=false,failurePolicy=fail,sideEffects=None,groups=sql.converge.dev,resources=mariadbinstances,verbs=create;update,versions=v1alpha1,name=vmariadbinstance.sql.converge.dev,admissionReviewVersions=v1,timeoutSeconds=10

// PostgresInstance defaults and validates PostgresInstances.
type PostgresInstance struct{}

// SetupWithManager registers the webhooks.
func (w PostgresInstance) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &sqlv1alpha1.PostgresInstance{}).WithDefaulter(w).WithValidator(w).Complete()
}

// Default sets port 5432, tls.mode Require and maxConnections 4.
func (PostgresInstance) Default(_ context.Context, i *sqlv1alpha1.PostgresInstance) error {
	defaultInstance(&i.Spec, 5432)
	return nil
}

// ValidateCreate checks a new PostgresInstance.
func (PostgresInstance) ValidateCreate(_ context.Context, i *sqlv1alpha1.PostgresInstance) (admission.Warnings, error) {
	return nil, specerr.Invalid(sqlv1alpha1.GroupVersion, "PostgresInstance", i.Name, validateInstance(&i.Spec))
}

// ValidateUpdate checks a changed PostgresInstance.
func (PostgresInstance) ValidateUpdate(_ context.Context, _, i *sqlv1alpha1.PostgresInstance) (admission.Warnings, error) {
	return nil, specerr.Invalid(sqlv1alpha1.GroupVersion, "PostgresInstance", i.Name, validateInstance(&i.Spec))
}

// ValidateDelete allows every deletion.
func (PostgresInstance) ValidateDelete(context.Context, *sqlv1alpha1.PostgresInstance) (admission.Warnings, error) {
	return nil, nil
}

// MariaDBInstance defaults and validates MariaDBInstances.
type MariaDBInstance struct{}

// SetupWithManager registers the webhooks.
func (w MariaDBInstance) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &sqlv1alpha1.MariaDBInstance{}).WithDefaulter(w).WithValidator(w).Complete()
}

// Default sets port 3306, tls.mode Require and maxConnections 4.
func (MariaDBInstance) Default(_ context.Context, i *sqlv1alpha1.MariaDBInstance) error {
	defaultInstance(&i.Spec, 3306)
	return nil
}

// ValidateCreate checks a new MariaDBInstance.
func (MariaDBInstance) ValidateCreate(_ context.Context, i *sqlv1alpha1.MariaDBInstance) (admission.Warnings, error) {
	return nil, specerr.Invalid(sqlv1alpha1.GroupVersion, "MariaDBInstance", i.Name, validateInstance(&i.Spec))
}

// ValidateUpdate checks a changed MariaDBInstance.
func (MariaDBInstance) ValidateUpdate(_ context.Context, _, i *sqlv1alpha1.MariaDBInstance) (admission.Warnings, error) {
	return nil, specerr.Invalid(sqlv1alpha1.GroupVersion, "MariaDBInstance", i.Name, validateInstance(&i.Spec))
}

// ValidateDelete allows every deletion.
func (MariaDBInstance) ValidateDelete(context.Context, *sqlv1alpha1.MariaDBInstance) (admission.Warnings, error) {
	return nil, nil
}

func defaultInstance(spec *sqlv1alpha1.InstanceSpec, port int32) {
	if spec.Port == 0 {
		spec.Port = port
	}
	if spec.MaxConnections == 0 {
		spec.MaxConnections = 4
	}
	if spec.TLS == nil {
		spec.TLS = &sqlv1alpha1.InstanceTLS{}
	}
	if spec.TLS.Mode == "" {
		spec.TLS.Mode = sqlv1alpha1.TLSRequire
	}
}

func validateInstance(spec *sqlv1alpha1.InstanceSpec) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if spec.TLS != nil && spec.TLS.Mode == sqlv1alpha1.TLSVerifyFull && spec.TLS.CASecretRef == nil {
		errs = append(errs, field.Required(p.Child("tls", "caSecretRef"), "tls.mode VerifyFull verifies the server against a CA; name the Secret holding ca.crt"))
	}
	if ms := validation.IsDNS1123Subdomain(spec.AdminSecretRef.Name); len(ms) > 0 {
		errs = append(errs, field.Invalid(p.Child("adminSecretRef", "name"), spec.AdminSecretRef.Name, fmt.Sprint(ms)))
	}
	return errs
}
