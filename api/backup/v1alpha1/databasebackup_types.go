package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupPhase is where a DatabaseBackup is in its life.
// +kubebuilder:validation:Enum=Running;Completed;Failed
type BackupPhase string

const (
	// BackupRunning means the dump is being taken.
	BackupRunning BackupPhase = "Running"
	// BackupCompleted means the dump is in the store and its checksum recorded.
	BackupCompleted BackupPhase = "Completed"
	// BackupFailed means the dump failed; the Failed condition says why.
	BackupFailed BackupPhase = "Failed"
)

// DatabaseReference names the Database a backup was taken of.
type DatabaseReference struct {
	// name is the Database's name (in this namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid is the Database's UID, so a backup is never mistaken for one of a
	// later Database with the same name.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid,omitempty"`

	// databaseName is the name of the database on the server.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	DatabaseName string `json:"databaseName,omitempty"`
}

// DatabaseBackupSpec says what was backed up.
type DatabaseBackupSpec struct {
	// databaseRef is the Database the dump was taken of. Immutable.
	// +required
	DatabaseRef DatabaseReference `json:"databaseRef"`
}

// DatabaseBackupStatus describes the dump.
type DatabaseBackupStatus struct {
	// phase is Running, Completed or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// startTime is when the dump started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the dump was complete and checksummed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// engine is the engine dumped (postgres, mariadb).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Engine string `json:"engine,omitempty"`

	// serverVersion is the version of the server dumped.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ServerVersion string `json:"serverVersion,omitempty"`

	// location is the dump's path relative to the backup store (the
	// manager's --backup-dir).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Location string `json:"location,omitempty"`

	// sizeBytes is the size of the dump file.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// sha256 is the hex SHA-256 of the dump file; restores verify it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SHA256 string `json:"sha256,omitempty"`

	// tool is the dump program and its version, for example
	// "pg_dump (PostgreSQL) 15.14".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Tool string `json:"tool,omitempty"`

	// conditions: Ready (True once Completed) and Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dbbackup,categories={converge,backup}
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.databaseRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.status.engine`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.sizeBytes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.status.location`,priority=1
// +kubebuilder:printcolumn:name="SHA256",type=string,JSONPath=`.status.sha256`,priority=1

// DatabaseBackup records a dump of a Database taken before it was deleted.
// The backup-before-delete controller creates it; a Database with
// spec.restoreFrom loads it.
type DatabaseBackup struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what was backed up.
	// +required
	Spec DatabaseBackupSpec `json:"spec"`

	// status describes the dump.
	// +optional
	Status DatabaseBackupStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DatabaseBackupList is a list of DatabaseBackups.
type DatabaseBackupList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the DatabaseBackups.
	Items []DatabaseBackup `json:"items"`
}

// GetConditions returns the conditions, for the conditions helpers.
func (b *DatabaseBackup) GetConditions() []metav1.Condition { return b.Status.Conditions }

// SetConditions sets the conditions, for the conditions helpers.
func (b *DatabaseBackup) SetConditions(c []metav1.Condition) { b.Status.Conditions = c }

// Finalizer, annotations and condition types of the backup API.
const (
	// BeforeDeleteFinalizer is the finalizer the backup controller holds on
	// Databases annotated with BeforeDeleteAnnotation: it is removed only
	// once a completed dump is recorded.
	BeforeDeleteFinalizer = "backup.converge.dev/before-delete"
	// BeforeDeleteAnnotation set to "true" on a Database asks for a dump
	// before it is deleted.
	BeforeDeleteAnnotation = "backup.converge.dev/before-delete"
	// SkipAnnotation set to "true" on a Database being deleted is the escape
	// hatch: the finalizer is removed without a dump (logged and evented).
	SkipAnnotation = "backup.converge.dev/skip"
	// BackupBeforeDeleteCondition is the condition the backup controller
	// sets on a Database's status while it holds up the deletion.
	BackupBeforeDeleteCondition = "BackupBeforeDelete"
	// ReadyCondition on a DatabaseBackup is True once it is Completed.
	ReadyCondition = "Ready"
	// FailedCondition on a DatabaseBackup is True when the dump failed.
	FailedCondition = "Failed"
)

// Condition reasons of the backup API.
const (
	// DumpingReason: the dump is being taken.
	DumpingReason = "Dumping"
	// DumpFailedReason: the dump failed; the message carries the error (for
	// example "no space left on device").
	DumpFailedReason = "DumpFailed"
	// CompletedReason: the dump is stored and checksummed.
	CompletedReason = "Completed"
	// SkippedReason: the skip annotation removed the finalizer without a dump.
	SkippedReason = "Skipped"
	// DatabaseGoneReason: there was nothing left to dump (the database was
	// already gone on the server).
	DatabaseGoneReason = "DatabaseGone"
)
