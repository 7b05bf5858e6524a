package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Engine names the database engine behind an instance, as published in
// status.engine of the instance contract.
// +kubebuilder:validation:Enum=postgres;mariadb
type Engine string

const (
	// EnginePostgres is PostgreSQL.
	EnginePostgres Engine = "postgres"
	// EngineMariaDB is MariaDB (and MySQL-compatible servers).
	EngineMariaDB Engine = "mariadb"
)

// TLSMode says whether and how Converge uses TLS to reach an instance.
// +kubebuilder:validation:Enum=Disable;Require;VerifyFull
type TLSMode string

const (
	// TLSDisable connects without TLS.
	TLSDisable TLSMode = "Disable"
	// TLSRequire requires TLS but does not verify the server certificate
	// (as libpq's sslmode=require). The default.
	TLSRequire TLSMode = "Require"
	// TLSVerifyFull requires TLS and verifies the certificate against
	// caSecretRef and the host name.
	TLSVerifyFull TLSMode = "VerifyFull"
)

// SecretReference names a Secret in the namespace of the referring object.
type SecretReference struct {
	// name is the name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// InstanceTLS configures TLS to the server.
type InstanceTLS struct {
	// mode is Require (default: encrypted, certificate not verified),
	// VerifyFull (encrypted, certificate verified against caSecretRef and
	// the host name) or Disable (plain text; only on a trusted network). A
	// server without TLS fails Require and VerifyFull with the reason
	// TLSUnavailable.
	// +optional
	Mode TLSMode `json:"mode,omitempty"`

	// caSecretRef names a Secret whose key ca.crt holds the PEM CA bundle
	// that signed the server certificate; required with VerifyFull.
	// +optional
	CASecretRef *SecretReference `json:"caSecretRef,omitempty"`
}

// InstanceSpec is the desired state shared by the built-in instance kinds:
// where the server is and how Converge logs in as an administrator.
type InstanceSpec struct {
	// host is the DNS name or IP address of the server.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$`
	Host string `json:"host"`

	// port is the TCP port of the server. Defaults to 5432 for PostgreSQL
	// and 3306 for MariaDB.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// adminSecretRef names a Secret in this namespace with the keys username
	// and password of an account allowed to create databases and roles.
	// +required
	AdminSecretRef SecretReference `json:"adminSecretRef"`

	// tls configures TLS to the server. Defaults to mode Require.
	// +optional
	TLS *InstanceTLS `json:"tls,omitempty"`

	// maxConnections bounds how many connections Converge opens to this
	// server at once (across all Databases on it). Defaults to 4.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxConnections int32 `json:"maxConnections,omitempty"`
}

// Endpoint is where clients reach a server.
type Endpoint struct {
	// host is the DNS name or IP address.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// port is the TCP port.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// InstanceStatus is the database instance contract: the fields any instance
// kind publishes so that Database works with it without knowing its type.
// See docs/contracts/database-instance.md.
type InstanceStatus struct {
	// ready is true once Converge has logged in with the admin credentials
	// and run SELECT 1 at the current generation.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// endpoint is where the server was reached.
	// +optional
	Endpoint *Endpoint `json:"endpoint,omitempty"`

	// engine is postgres or mariadb.
	// +optional
	Engine Engine `json:"engine,omitempty"`

	// version is the server version, as the server reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Version string `json:"version,omitempty"`

	// adminSecretRef names the Secret (in this namespace) with the admin
	// username and password that Ready was verified with.
	// +optional
	AdminSecretRef *SecretReference `json:"adminSecretRef,omitempty"`

	// observedGeneration is the generation last fully reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the current state: Ready, and Stalled while only
	// a change by the user (a Secret, the spec) can help.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="contract.converge.dev/database-instance=v1alpha1"
// +kubebuilder:resource:shortName=pgi,categories={converge,sql}
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.status.endpoint.host`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.status.endpoint.port`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// PostgresInstance is a PostgreSQL server Converge may create databases on.
// Its status honours the database instance contract.
type PostgresInstance struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec InstanceSpec `json:"spec"`

	// status is the observed state: the instance contract.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status InstanceStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// PostgresInstanceList is a list of PostgresInstances.
type PostgresInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the PostgresInstances.
	Items []PostgresInstance `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="contract.converge.dev/database-instance=v1alpha1"
// +kubebuilder:resource:shortName=mdbi,categories={converge,sql}
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.status.endpoint.host`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.status.endpoint.port`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// MariaDBInstance is a MariaDB server Converge may create databases on. Its
// status honours the database instance contract.
type MariaDBInstance struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec InstanceSpec `json:"spec"`

	// status is the observed state: the instance contract.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status InstanceStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MariaDBInstanceList is a list of MariaDBInstances.
type MariaDBInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the MariaDBInstances.
	Items []MariaDBInstance `json:"items"`
}

// GetConditions returns the conditions, for the conditions helpers.
func (i *PostgresInstance) GetConditions() []metav1.Condition { return i.Status.Conditions }

// SetConditions sets the conditions, for the conditions helpers.
func (i *PostgresInstance) SetConditions(c []metav1.Condition) { i.Status.Conditions = c }

// GetConditions returns the conditions, for the conditions helpers.
func (i *MariaDBInstance) GetConditions() []metav1.Condition { return i.Status.Conditions }

// SetConditions sets the conditions, for the conditions helpers.
func (i *MariaDBInstance) SetConditions(c []metav1.Condition) { i.Status.Conditions = c }

// Instance is implemented by the built-in instance kinds, so one controller
// serves both.
// +kubebuilder:object:generate=false
type Instance interface {
	metav1.Object
	InstanceSpec() *InstanceSpec
	InstanceStatus() *InstanceStatus
	Engine() Engine
}

// InstanceSpec returns the spec.
func (i *PostgresInstance) InstanceSpec() *InstanceSpec { return &i.Spec }

// InstanceStatus returns the status.
func (i *PostgresInstance) InstanceStatus() *InstanceStatus { return &i.Status }

// Engine returns postgres.
func (i *PostgresInstance) Engine() Engine { return EnginePostgres }

// InstanceSpec returns the spec.
func (i *MariaDBInstance) InstanceSpec() *InstanceSpec { return &i.Spec }

// InstanceStatus returns the status.
func (i *MariaDBInstance) InstanceStatus() *InstanceStatus { return &i.Status }

// Engine returns mariadb.
func (i *MariaDBInstance) Engine() Engine { return EngineMariaDB }
