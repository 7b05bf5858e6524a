package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Key algorithms, encodings and rotation policies.
const (
	RSAKeyAlgorithm     = "RSA"
	ECDSAKeyAlgorithm   = "ECDSA"
	Ed25519KeyAlgorithm = "Ed25519"

	PKCS1 = "PKCS1"
	PKCS8 = "PKCS8"

	RotationPolicyAlways = "Always"
	RotationPolicyNever  = "Never"
)

// CertificateSpec is the desired key pair.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.renewBefore) && has(self.renewBeforePercentage))",message="renewBefore and renewBeforePercentage are exclusive"
type CertificateSpec struct {
	// secretName is the kubernetes.io/tls Secret the key pair is written to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
	// secretTemplate holds labels and annotations copied to the Secret.
	// +optional
	SecretTemplate *SecretTemplate `json:"secretTemplate,omitempty"`
	// commonName is the subject's CN.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CommonName string `json:"commonName,omitempty"`
	// dnsNames are the DNS subject alternative names.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	DNSNames []string `json:"dnsNames,omitempty"`
	// ipAddresses are the IP subject alternative names.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=45
	IPAddresses []string `json:"ipAddresses,omitempty"`
	// uris are the URI subject alternative names.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=2048
	URIs []string `json:"uris,omitempty"`
	// emailAddresses are the email subject alternative names.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=320
	EmailAddresses []string `json:"emailAddresses,omitempty"`
	// duration is the requested lifetime; 2160h (90 days) when empty; at
	// least 1h.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// renewBefore is how long before expiry the certificate is renewed.
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
	// renewBeforePercentage is renewBefore as a percentage of the lifetime.
	// When neither is set the certificate is renewed when 2/3 of its
	// lifetime has passed.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	RenewBeforePercentage *int32 `json:"renewBeforePercentage,omitempty"`
	// isCA marks the certificate as a CA (basic constraints).
	// +optional
	IsCA bool `json:"isCA,omitempty"`
	// usages are the key usages and extended key usages; "digital
	// signature" and "key encipherment" when empty (as cert-manager).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Usages []KeyUsage `json:"usages,omitempty"`
	// privateKey configures the key.
	// +optional
	PrivateKey *CertificatePrivateKey `json:"privateKey,omitempty"`
	// issuerRef names the issuer.
	// +required
	IssuerRef IssuerReference `json:"issuerRef"`
	// revisionHistoryLimit is how many CertificateRequests are kept; 1 when
	// empty.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
	// ownSecret sets an ownerReference from the Secret to the Certificate, so
	// that deleting the Certificate deletes the Secret. Off by default (a
	// deleted Certificate must not take down a serving workload);
	// --certificate-owns-secret turns it on for all.
	// +optional
	OwnSecret *bool `json:"ownSecret,omitempty"`
}

// SecretTemplate holds metadata copied to the Secret.
type SecretTemplate struct {
	// labels copied to the Secret.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// annotations copied to the Secret.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// CertificatePrivateKey configures the private key.
type CertificatePrivateKey struct {
	// algorithm is RSA (default), ECDSA or Ed25519.
	// +optional
	// +kubebuilder:validation:Enum=RSA;ECDSA;Ed25519
	Algorithm string `json:"algorithm,omitempty"`
	// size is the RSA modulus (2048 default, 3072, 4096...) or the ECDSA
	// curve size (256 default, 384, 521).
	// +optional
	Size int32 `json:"size,omitempty"`
	// encoding is PKCS1 (default) or PKCS8.
	// +optional
	// +kubebuilder:validation:Enum=PKCS1;PKCS8
	Encoding string `json:"encoding,omitempty"`
	// rotationPolicy Always (default) makes a new key at each issuance;
	// Never keeps the key in the Secret.
	// +optional
	// +kubebuilder:validation:Enum=Always;Never
	RotationPolicy string `json:"rotationPolicy,omitempty"`
}

// IssuerReference names an issuer.
type IssuerReference struct {
	// name of the issuer.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// kind is Issuer (default) or ClusterIssuer for the built-in group; any
	// kind for another group (an external issuer).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`
	// group is pki.converge.dev (default) or an external issuer's group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
}

// KeyUsage is a key usage or extended key usage, spelled as cert-manager.
// +kubebuilder:validation:Enum=signing;digital signature;content commitment;key encipherment;key agreement;data encipherment;cert sign;crl sign;encipher only;decipher only;any;server auth;client auth;code signing;email protection;s/mime;ipsec end system;ipsec tunnel;ipsec user;timestamping;ocsp signing;microsoft sgc;netscape sgc
type KeyUsage string

// CertificateStatus is the observed state of a Certificate.
type CertificateStatus struct {
	// conditions: Ready, Issuing, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// notBefore of the certificate in the Secret.
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
	// notAfter of the certificate in the Secret.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// renewalTime is when the certificate will be renewed.
	// +optional
	RenewalTime *metav1.Time `json:"renewalTime,omitempty"`
	// revision counts the issuances written to the Secret.
	// +optional
	Revision *int32 `json:"revision,omitempty"`
	// nextPrivateKeySecretName is the Secret holding the key of the
	// issuance in progress.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NextPrivateKeySecretName string `json:"nextPrivateKeySecretName,omitempty"`
	// failedIssuanceAttempts counts the failed attempts since the last
	// success; the next waits 1h·2^(n-1), at most 32h.
	// +optional
	FailedIssuanceAttempts *int32 `json:"failedIssuanceAttempts,omitempty"`
	// lastFailureTime is when the last attempt failed.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
	// nextRetryTime is when the next attempt is made after a failure.
	// +optional
	NextRetryTime *metav1.Time `json:"nextRetryTime,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Certificate is a key pair, signed by an issuer and kept valid and fresh in
// a Secret.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cert;certs,categories=converge;pki
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.secretName`
// +kubebuilder:printcolumn:name="Issuer",type=string,JSONPath=`.spec.issuerRef.name`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.status.notAfter`
// +kubebuilder:printcolumn:name="Renewal",type=date,JSONPath=`.status.renewalTime`,priority=1
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired key pair.
	// +required
	Spec CertificateSpec `json:"spec"`
	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status CertificateStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// CertificateList is a list of Certificates.
type CertificateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Certificate `json:"items"`
}

// CertificateRequestSpec is one signing request.
type CertificateRequestSpec struct {
	// request is the PEM-encoded PKCS#10 CSR.
	// +required
	// +kubebuilder:validation:MinLength=1
	Request []byte `json:"request"`
	// issuerRef names the issuer; the controller of issuerRef.group signs.
	// +required
	IssuerRef IssuerReference `json:"issuerRef"`
	// duration is the requested lifetime.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// usages are the requested key usages.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Usages []KeyUsage `json:"usages,omitempty"`
	// isCA requests a CA certificate.
	// +optional
	IsCA bool `json:"isCA,omitempty"`
}

// CertificateRequestStatus is the outcome of a request.
type CertificateRequestStatus struct {
	// conditions: Ready, Denied, InvalidRequest.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// certificate is the signed certificate and its chain, PEM.
	// +optional
	Certificate []byte `json:"certificate,omitempty"`
	// ca is the CA certificate, PEM, when the issuer knows it.
	// +optional
	CA []byte `json:"ca,omitempty"`
	// failureTime is when the request failed for good.
	// +optional
	FailureTime *metav1.Time `json:"failureTime,omitempty"`
}

// CertificateRequest asks an issuer to sign one CSR. It is the issuer
// contract: any controller may sign requests whose issuerRef.group is its
// own (docs/contracts/certificate-issuer.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cr;crs,categories=converge;pki
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Issuer",type=string,JSONPath=`.spec.issuerRef.name`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CertificateRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	// +required
	Spec CertificateRequestSpec `json:"spec"`
	// status is the outcome.
	// +optional
	Status CertificateRequestStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// CertificateRequestList is a list of CertificateRequests.
type CertificateRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CertificateRequest `json:"items"`
}
