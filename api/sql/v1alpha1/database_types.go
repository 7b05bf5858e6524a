package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletionPolicy says what happens to the database on the server when the
// Database object is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionRetain keeps the database and its owner role on the server.
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete terminates open connections, then drops the database
	// and its owner role.
	DeletionDelete DeletionPolicy = "Delete"
)

// InstanceReference names an object, in the Database's namespace, of any
// kind that honours the database instance contract.
type InstanceReference struct {
	// apiVersion is the group/version of the instance kind, for example
	// sql.converge.dev/v1alpha1.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`

	// kind is the instance kind, for example PostgresInstance.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`

	// name is the name of the instance.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name is the object's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// DatabaseSpec is the desired state of a Database.
type DatabaseSpec struct {
	// instanceRef names the server: any kind in this namespace that honours
	// the database instance contract (PostgresInstance, MariaDBInstance, or a
	// third-party kind). Immutable.
	// +required
	InstanceRef InstanceReference `json:"instanceRef"`

	// databaseName is the name of the database on the server. Lowercase
	// letters, digits, '_' and '-', starting with a letter or '_', at most
	// 63 characters. Defaults to metadata.name. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	DatabaseName string `json:"databaseName,omitempty"`

	// owner is the role (PostgreSQL) or user (MariaDB) created to own the
	// database; the connection Secret logs in as it. Same rules as
	// databaseName. Defaults to databaseName with the suffix "_owner"
	// (truncated to 63 characters). Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Owner string `json:"owner,omitempty"`

	// charset is the character set of a new database: the PostgreSQL
	// ENCODING (for example UTF8) or the MariaDB CHARACTER SET (for example
	// utf8mb4). Defaults to UTF8 on PostgreSQL and utf8mb4 on MariaDB. Only
	// used when the database is created. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_]+$`
	Charset string `json:"charset,omitempty"`

	// extensions are PostgreSQL extensions to create in the database (CREATE
	// EXTENSION IF NOT EXISTS). Rejected for MariaDB instances. Extensions
	// removed from the list are not dropped.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	Extensions []string `json:"extensions,omitempty"`

	// deletionPolicy is Retain (default: nothing is dropped on the server
	// when this object is deleted) or Delete (open connections are
	// terminated, then the database and its owner role are dropped).
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// connectionSecret is the name of the Secret the controller writes, with
	// the keys host, port, database, username, password and uri, the same for
	// every engine. Defaults to "<metadata.name>-connection".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConnectionSecret string `json:"connectionSecret,omitempty"`

	// adoptExisting lets this Database take over a database or owner role
	// that already exists on the server and was not created by Converge:
	// its owner marker is written and it is managed (altered, granted, its
	// password reset, dropped with deletionPolicy Delete) from then on.
	// Without it, such objects are refused (reasons DatabaseNotOwned,
	// RoleNotOwned) and never touched. Objects another Database created are
	// never adopted, except those a deleted Database of the same namespace
	// and name retained. A privileged role (the instance's admin, a
	// superuser, CREATEROLE, ...) is never adopted (reason PrivilegedRole).
	// +optional
	AdoptExisting bool `json:"adoptExisting,omitempty"`

	// restoreFrom names a DatabaseBackup (backup.converge.dev) in this
	// namespace to load into the new, empty database before it turns Ready.
	// Immutable.
	// +optional
	RestoreFrom *LocalObjectReference `json:"restoreFrom,omitempty"`
}

// AtProvider is what the controller last observed on the server.
type AtProvider struct {
	// exists is whether the database existed at the last observation.
	// +optional
	Exists bool `json:"exists,omitempty"`

	// owner is the owner role of the database as the server reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Owner string `json:"owner,omitempty"`

	// sizeBytes is the size of the database on disk, as the server reports it.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// observedTime is when the server was observed as the other fields
	// say: an observation that finds the same existence, owner and size
	// keeps the earlier time, so a Database at rest is not written.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}

// DriftCorrection records one correction of drift found on the server.
type DriftCorrection struct {
	// kind is what was corrected: DatabaseRecreated, PasswordReset or
	// PrivilegesGranted.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Kind string `json:"kind"`

	// message says what was found and done.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// time is when the correction was made.
	// +required
	Time metav1.Time `json:"time"`
}

// DatabaseStatus is the observed state of a Database.
type DatabaseStatus struct {
	// engine is the engine the instance reported (postgres, mariadb, ...).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Engine string `json:"engine,omitempty"`

	// databaseName is the name of the database on the server.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	DatabaseName string `json:"databaseName,omitempty"`

	// owner is the owner role on the server.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Owner string `json:"owner,omitempty"`

	// atProvider is what was last observed on the server.
	// +optional
	AtProvider AtProvider `json:"atProvider,omitempty"`

	// lastDriftCorrected is the latest correction of drift (a database
	// dropped out of band, a changed password, revoked privileges).
	// +optional
	LastDriftCorrected *DriftCorrection `json:"lastDriftCorrected,omitempty"`

	// driftCorrections counts every correction made since creation.
	// +optional
	DriftCorrections int64 `json:"driftCorrections,omitempty"`

	// restoredFrom is the DatabaseBackup loaded into this database, once the
	// load has completed.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RestoredFrom string `json:"restoredFrom,omitempty"`

	// lastHandledReconcileAt is the last value of the
	// converge.dev/reconcile-requested-at annotation acted on: a requested
	// observation leaves this mark even when it found nothing to change.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// observedGeneration is the generation last fully reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the current state: Ready (the owner can log in),
	// Synced (the server matches the spec; reasons say what was corrected),
	// Stalled (only a user change helps), and Deleting (what blocks the
	// deletion).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sqldb,categories={converge,sql}
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.status.databaseName`
// +kubebuilder:printcolumn:name="Instance",type=string,JSONPath=`.spec.instanceRef.name`
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.status.engine`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Synced",type=string,JSONPath=`.status.conditions[?(@.type=="Synced")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.deletionPolicy`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// Database is a database and its owner role on a server that honours the
// database instance contract, with a connection Secret for applications.
// The short name is sqldb because "db" is too generic to claim.
type Database struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec DatabaseSpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status DatabaseStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DatabaseList is a list of Databases.
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the Databases.
	Items []Database `json:"items"`
}

// GetConditions returns the conditions, for the conditions helpers.
func (d *Database) GetConditions() []metav1.Condition { return d.Status.Conditions }

// SetConditions sets the conditions, for the conditions helpers.
func (d *Database) SetConditions(c []metav1.Condition) { d.Status.Conditions = c }
