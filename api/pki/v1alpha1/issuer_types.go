package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// IssuerSpec configures an issuer: exactly one of selfSigned, ca and acme.
//
// +kubebuilder:validation:XValidation:rule="(has(self.selfSigned) ? 1 : 0) + (has(self.ca) ? 1 : 0) + (has(self.acme) ? 1 : 0) == 1",message="exactly one of selfSigned, ca and acme must be set"
type IssuerSpec struct {
	// selfSigned signs each request with its own private key.
	// +optional
	SelfSigned *SelfSignedIssuer `json:"selfSigned,omitempty"`
	// ca signs with a CA key pair held in a Secret.
	// +optional
	CA *CAIssuer `json:"ca,omitempty"`
	// acme obtains certificates from an ACME (RFC 8555) server.
	// +optional
	ACME *ACMEIssuer `json:"acme,omitempty"`
}

// SelfSignedIssuer signs each request with its own key.
type SelfSignedIssuer struct{}

// CAIssuer signs with a CA key pair.
type CAIssuer struct {
	// secretName is the kubernetes.io/tls Secret holding the CA (tls.crt,
	// tls.key): in the Issuer's namespace, or for a ClusterIssuer in the
	// cluster resource namespace (--cluster-resource-namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
}

// ACMEIssuer obtains certificates from an ACME server with HTTP-01.
type ACMEIssuer struct {
	// server is the ACME directory URL.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Server string `json:"server"`
	// email is the account's contact address.
	// +optional
	// +kubebuilder:validation:MaxLength=320
	Email string `json:"email,omitempty"`
	// privateKeySecretRef names the Secret holding the account key; it is
	// created when missing.
	// +required
	PrivateKeySecretRef SecretKeySelector `json:"privateKeySecretRef"`
	// caBundle is a PEM bundle trusted for the server's TLS (private ACME
	// servers); empty uses the system roots.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
	// solvers says how challenges are answered. Only http01 is supported:
	// Converge answers it itself (--acme-http01-bind-address).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Solvers []ACMESolver `json:"solvers,omitempty"`
}

// SecretKeySelector names a Secret (and optionally a key in it).
type SecretKeySelector struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret; tls.key when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// ACMESolver answers challenges.
type ACMESolver struct {
	// http01 answers HTTP-01 challenges.
	// +optional
	HTTP01 *ACMEHTTP01Solver `json:"http01,omitempty"`
}

// ACMEHTTP01Solver answers HTTP-01 challenges from Converge's own listener.
// cert-manager's ingress and gatewayHTTPRoute fields are accepted and
// ignored: route port 80 of the names to that listener.
type ACMEHTTP01Solver struct {
	// ingress is accepted for compatibility with cert-manager and ignored.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Ingress *runtime.RawExtension `json:"ingress,omitempty"`
}

// IssuerStatus is the observed state of an issuer.
type IssuerStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// acme is the ACME account.
	// +optional
	ACME *ACMEIssuerStatus `json:"acme,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ACMEIssuerStatus is the registered ACME account.
type ACMEIssuerStatus struct {
	// uri is the account URL.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URI string `json:"uri,omitempty"`
	// lastRegisteredEmail is the contact the account was registered with.
	// +optional
	// +kubebuilder:validation:MaxLength=320
	LastRegisteredEmail string `json:"lastRegisteredEmail,omitempty"`
	// lastPrivateKeyHash is the SHA-256 of the account key's public half.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	LastPrivateKeyHash string `json:"lastPrivateKeyHash,omitempty"`
	// lastServer is the directory URL the account was registered on.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	LastServer string `json:"lastServer,omitempty"`
}

// Issuer signs CertificateRequests of its own namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=converge;pki
// +kubebuilder:metadata:labels="contract.converge.dev/issuer=v1alpha1"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec configures the issuer.
	// +required
	Spec IssuerSpec `json:"spec"`
	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status IssuerStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// IssuerList is a list of Issuers.
type IssuerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Issuer `json:"items"`
}

// ClusterIssuer signs CertificateRequests of every namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=converge;pki
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec configures the issuer and who may use it for which names.
	// +required
	Spec ClusterIssuerSpec `json:"spec"`
	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status IssuerStatus `json:"status,omitempty"`
}

// ClusterIssuerSpec is an IssuerSpec and the policy of who may use it.
type ClusterIssuerSpec struct {
	IssuerSpec `json:",inline"`
	// policy says which namespaces may have requests signed and for which
	// DNS names and IP addresses. Unset, every namespace may, a
	// cluster-internal name (<x>.<namespace>.svc..., <x>.<namespace>.pod...)
	// and a SPIFFE ID (spiffe://<domain>/ns/<namespace>/...) are signed only
	// for a request of that namespace, and an IP address for none (requests
	// of --cluster-resource-namespace are exempt).
	// +optional
	Policy *ClusterIssuerPolicy `json:"policy,omitempty"`
}

// ClusterIssuerPolicy bounds which requests a ClusterIssuer signs, as
// approver-policy's CertificateRequestPolicy does for cert-manager. A
// request it refuses is Denied (reason IssuerPolicyDenied), final.
type ClusterIssuerPolicy struct {
	// namespaceSelector selects the namespaces whose requests are signed
	// (by their labels); unset, every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// allowedDNSNames are the DNS names (and a DNS-like common name) a
	// request may carry; empty keeps the default rule for
	// cluster-internal names. "{namespace}" stands for the requesting
	// namespace and "*" for one DNS label (a requested wildcard label
	// included), e.g. "*.{namespace}.svc", "*.{namespace}.svc.cluster.local",
	// "*.example.com". Set, it replaces the default rule: every name must
	// match, in every namespace.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*|\{namespace\}|[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)(\.(\*|\{namespace\}|[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?))*$`
	AllowedDNSNames []string `json:"allowedDNSNames,omitempty"`
	// allowedIPAddresses are the CIDRs an IP address of a request must
	// lie in, e.g. "10.96.0.0/12", "2001:db8::/64", "192.0.2.7/32" for one
	// address. Empty (or no policy), a request carries an IP address only
	// in --cluster-resource-namespace: an address, a Service's ClusterIP
	// or a node's, belongs to no namespace a name could tell. Set, every
	// address must lie in one, in every namespace.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=49
	AllowedIPAddresses []string `json:"allowedIPAddresses,omitempty"`
	// allowedEmailAddresses are the e-mail addresses a request may carry,
	// as <local part>@<domain>: the local part is "*" (any), "{namespace}"
	// (the requesting namespace) or itself (case-sensitively); the domain
	// is matched as allowedDNSNames are, "*" one DNS label, e.g.
	// "{namespace}@example.com", "*@{namespace}.mail.example.com".
	// Empty (or no policy), a request carries an e-mail address only in
	// --cluster-resource-namespace: an address belongs to no namespace.
	// Set, every address must match one, in every namespace.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=320
	// +kubebuilder:validation:items:Pattern=`^(\*|\{namespace\}|[-a-zA-Z0-9.!#$%&'+/=?^_|~]+)@(\*|\{namespace\}|[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)(\.(\*|\{namespace\}|[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?))*$`
	AllowedEmailAddresses []string `json:"allowedEmailAddresses,omitempty"`
	// allowedURIs are the URIs a request may carry, as
	// scheme://host[:port][/path]: the scheme and port match themselves,
	// the host is matched as allowedDNSNames are, and the path segment by
	// segment, "*" being any one non-empty segment (never a "/", never a
	// dot segment) and "{namespace}" the requesting namespace, any other
	// segment itself; a URI with user info, a query or a fragment matches
	// none. E.g. "spiffe://cluster.local/ns/{namespace}/sa/*",
	// "https://{namespace}.apps.example.com/". Empty (or no policy), a
	// request of a namespace other than --cluster-resource-namespace
	// carries only Kubernetes SPIFFE IDs of its own namespace
	// (spiffe://<trust domain>/ns/<namespace>/...). Set, every URI must
	// match one, in every namespace.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z][-a-zA-Z0-9+.]*://(\*|\{namespace\}|[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)(\.(\*|\{namespace\}|[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?))*(:[0-9]{1,5})?(/(\*|\{namespace\}|[-a-zA-Z0-9._~!$&'()+,;=:@%]*))*$`
	AllowedURIs []string `json:"allowedURIs,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterIssuerList is a list of ClusterIssuers.
type ClusterIssuerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterIssuer `json:"items"`
}

// GenericIssuer is an Issuer or a ClusterIssuer.
//
// +kubebuilder:object:generate=false
type GenericIssuer interface {
	GetName() string
	GetNamespace() string
	GetGeneration() int64
	GetSpec() *IssuerSpec
	GetStatus() *IssuerStatus
}

// GetSpec returns the spec.
func (i *Issuer) GetSpec() *IssuerSpec { return &i.Spec }

// GetStatus returns the status.
func (i *Issuer) GetStatus() *IssuerStatus { return &i.Status }

// GetSpec returns the spec.
func (i *ClusterIssuer) GetSpec() *IssuerSpec { return &i.Spec.IssuerSpec }

// GetStatus returns the status.
func (i *ClusterIssuer) GetStatus() *IssuerStatus { return &i.Status }
