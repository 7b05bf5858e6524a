package v1alpha1

// Condition types of the sql API.
const (
	// ReadyCondition summarises the object. An instance is Ready once an
	// admin login and SELECT 1 succeed; a Database once its owner logs in
	// with the credentials in the connection Secret.
	ReadyCondition = "Ready"
	// SyncedCondition is True when the server matched the spec at the last
	// observation (after any correction).
	SyncedCondition = "Synced"
	// StalledCondition is True (and present only then) while only a change
	// by the user can help: a wrong password, a missing Secret, a bad spec.
	StalledCondition = "Stalled"
	// DeletingCondition is present while a Database is being deleted; its
	// reason and message say what the deletion waits for, including another
	// controller's finalizer.
	DeletingCondition = "Deleting"
)

// Condition reasons of the sql API.
const (
	// ConnectedReason: the login and SELECT 1 succeeded.
	ConnectedReason = "Connected"
	// UnreachableReason: the server could not be reached (network, DNS,
	// refused, timed out); retried with backoff.
	UnreachableReason = "Unreachable"
	// HostNotAllowedReason: the instance's host resolves to an address
	// the cluster admin denies (--egress-denied-cidrs: loopback,
	// link-local and the metadata addresses by default); nothing was
	// dialled. Stalled, checked again every health interval.
	HostNotAllowedReason = "HostNotAllowed"
	// AuthenticationFailedReason: the server refused the admin credentials.
	AuthenticationFailedReason = "AuthenticationFailed"
	// AdminSecretInvalidReason: the admin Secret is missing or lacks the
	// username or password key.
	AdminSecretInvalidReason = "AdminSecretInvalid"
	// InvalidSpecReason: the spec cannot be acted on (for example TLS
	// VerifyFull without a CA).
	InvalidSpecReason = "InvalidSpec"

	// AvailableReason: the database exists and its owner can log in.
	AvailableReason = "Available"
	// ProvisioningReason: the database, role or Secret is being created.
	ProvisioningReason = "Provisioning"
	// RestoreFailedReason: loading restoreFrom failed; the message says why.
	RestoreFailedReason = "RestoreFailed"
	// InstanceNotFoundReason: the referenced instance does not exist.
	InstanceNotFoundReason = "InstanceNotFound"
	// InstanceNotReadyReason: the instance exists but its contract status is
	// not ready; the Database waits.
	InstanceNotReadyReason = "InstanceNotReady"
	// InstanceContractNotDeclaredReason: spec.instanceRef names a kind that
	// is not a namespaced kind whose CustomResourceDefinition carries the
	// label contract.converge.dev/database-instance=v1alpha1 (a core kind
	// such as Secret, a cluster-scoped or unlabelled kind). Nothing of it is
	// read or watched (Stalled).
	InstanceContractNotDeclaredReason = "InstanceContractNotDeclared"
	// InstanceUnavailableReason: the instance is ready but the server could
	// not be reached or refused the admin login; retried with backoff.
	InstanceUnavailableReason = "InstanceUnavailable"
	// ContractViolationReason: the instance's status does not honour the
	// database instance contract (missing endpoint, unknown engine, ...).
	ContractViolationReason = "ContractViolation"
	// UnsupportedReason: the spec asks for something the engine lacks (for
	// example extensions on MariaDB).
	UnsupportedReason = "Unsupported"
	// ProvisionFailedReason: a statement on the server failed.
	ProvisionFailedReason = "ProvisionFailed"
	// LoginFailedReason: the owner could not log in with the generated
	// credentials even after resetting them.
	LoginFailedReason = "LoginFailed"

	// DatabaseNotOwnedReason: the database exists on the server and was not
	// created by this Database (no owner marker, or another Database's);
	// nothing is altered, granted or dropped. Set spec.adoptExisting to take
	// over an unmarked one, or choose another databaseName.
	DatabaseNotOwnedReason = "DatabaseNotOwned"
	// RoleNotOwnedReason: the owner role exists on the server and was not
	// created by this Database; its password is never reset. Set
	// spec.adoptExisting to take over an unmarked one, or choose another
	// owner.
	RoleNotOwnedReason = "RoleNotOwned"
	// PrivilegedRoleReason: the owner names the instance's admin user or a
	// role with more than one database's worth of power (PostgreSQL
	// SUPERUSER, CREATEROLE, CREATEDB, REPLICATION, BYPASSRLS, or membership
	// in such a role; MariaDB global privileges or GRANT OPTION), as the
	// server reports it. Never adopted; choose another owner.
	PrivilegedRoleReason = "PrivilegedRole"
	// TLSUnavailableReason: TLS was required (tls.mode Require or
	// VerifyFull, Require being the default) and the server offers none.
	// Enable TLS on the server, or set tls.mode: Disable explicitly on a
	// trusted network.
	TLSUnavailableReason = "TLSUnavailable"
	// TLSVerificationFailedReason: tls.mode VerifyFull and the server's
	// certificate did not verify against tls.caSecretRef (unknown CA, wrong
	// host name, expired).
	TLSVerificationFailedReason = "TLSVerificationFailed"

	// UpToDateReason: nothing had drifted.
	UpToDateReason = "UpToDate"
	// DriftCorrectedReason: drift was found and corrected; the message says
	// what.
	DriftCorrectedReason = "DriftCorrected"

	// WaitingForFinalizersReason: other controllers' finalizers block the
	// deletion; the message names them and, when they say so, why.
	WaitingForFinalizersReason = "WaitingForFinalizers"
	// DroppingReason: connections are being terminated and the database and
	// role dropped.
	DroppingReason = "Dropping"
	// RetainedReason: deletionPolicy Retain; nothing is dropped.
	RetainedReason = "Retained"
)

// Drift correction kinds recorded in status.lastDriftCorrected and in the
// converge_database_drift_corrections_total metric.
const (
	// DriftDatabaseRecreated: the database was missing and was created empty.
	DriftDatabaseRecreated = "DatabaseRecreated"
	// DriftPasswordReset: the owner could not log in; its password was reset.
	DriftPasswordReset = "PasswordReset"
	// DriftPrivilegesGranted: the owner lacked privileges; they were granted.
	DriftPrivilegesGranted = "PrivilegesGranted"
	// DriftRoleRecreated: the owner role was missing and was created.
	DriftRoleRecreated = "RoleRecreated"
)

// Finalizers, annotations and labels.
const (
	// DatabaseFinalizer lets the Database controller drop the database (with
	// deletionPolicy Delete) before the object goes. It only acts once it is
	// the last finalizer left, so other controllers (backups) go first.
	DatabaseFinalizer = "sql.converge.dev/database"
	// ReconcileRequestedAtAnnotation requests an immediate observation when
	// its value changes (any string; a timestamp by convention).
	ReconcileRequestedAtAnnotation = "converge.dev/reconcile-requested-at"
	// DatabaseLabel labels objects derived from a Database (connection
	// Secrets, DatabaseBackups) with its name.
	DatabaseLabel = "sql.converge.dev/database"
)
