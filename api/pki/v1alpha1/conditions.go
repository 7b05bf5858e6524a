package v1alpha1

// Condition types of the pki API.
const (
	// ReadyCondition summarises the object: an issuer can sign; a
	// Certificate's Secret holds a valid, current key pair matching the spec;
	// a CertificateRequest is signed.
	ReadyCondition = "Ready"
	// IssuingCondition is True (and present only then) while a Certificate
	// is being issued, renewed or repaired; its reason says why.
	IssuingCondition = "Issuing"
	// StalledCondition is True (and present only then) while only a change
	// by the user can help.
	StalledCondition = "Stalled"
	// DeniedCondition is True when an approver refused a CertificateRequest.
	DeniedCondition = "Denied"
	// InvalidRequestCondition is True when a CertificateRequest cannot be
	// signed as written (a bad CSR, an unknown issuer kind).
	InvalidRequestCondition = "InvalidRequest"
)

// Issuer reasons.
const (
	// IssuerReadyReason: the issuer can sign (self-signed; the CA key pair
	// loads and is a CA; the ACME account is registered).
	IssuerReadyReason = "IssuerReady"
	// CASecretInvalidReason: the CA Secret is missing, does not hold a key
	// pair, or holds a certificate that is not a CA.
	CASecretInvalidReason = "CASecretInvalid"
	// ACMERegistrationFailedReason: the ACME server refused the account or
	// could not be reached; the message holds its problem document.
	ACMERegistrationFailedReason = "ACMERegistrationFailed"
	// ACMEServerNotAllowedReason: spec.acme.server is not under a directory
	// the cluster admin allowed (--acme-allowed-directories); the issuer is
	// Stalled and no request is made.
	ACMEServerNotAllowedReason = "ACMEServerNotAllowed"
)

// Certificate reasons.
const (
	// CertificateReadyReason: the Secret holds a valid key pair matching the
	// spec, not yet due for renewal.
	CertificateReadyReason = "CertificateReady"
	// DoesNotExistReason: the Secret does not exist (first issue or deleted).
	DoesNotExistReason = "DoesNotExist"
	// InvalidKeyPairReason: the Secret's key and certificate are missing, do
	// not parse or do not belong together (edited out of band).
	InvalidKeyPairReason = "InvalidKeyPair"
	// SpecChangedReason: the certificate in the Secret no longer matches the
	// spec (names, usages, duration, key, issuer).
	SpecChangedReason = "SpecChanged"
	// RenewingReason: the renewal time has been reached.
	RenewingReason = "Renewing"
	// ManuallyTriggeredReason: `converge cert renew` asked for a new
	// certificate.
	ManuallyTriggeredReason = "ManuallyTriggered"
	// SecretNotOwnedReason: a Secret with the target name exists and was not
	// written for this Certificate; it is never overwritten.
	SecretNotOwnedReason = "SecretNotOwned"
	// KeySizeNotAllowedReason: spec.privateKey.size is an RSA size above
	// what the cluster admin allows (--max-rsa-key-size); no key is made and
	// nothing is requested (Stalled).
	KeySizeNotAllowedReason = "KeySizeNotAllowed"
	// IssuerContractNotDeclaredReason: spec.issuerRef names a kind of
	// another group that is not a namespaced kind whose CRD carries the
	// label contract.converge.dev/issuer=v1alpha1 (a core kind, a
	// cluster-scoped kind, a CRD without the label); no key is made and
	// no CertificateRequest is created (Stalled).
	IssuerContractNotDeclaredReason = "IssuerContractNotDeclared"
	// IssuerNotFoundReason: the referenced Issuer or ClusterIssuer does not
	// exist.
	IssuerNotFoundReason = "IssuerNotFound"
	// IssuerNotReadyReason: the referenced issuer exists but is not Ready.
	IssuerNotReadyReason = "IssuerNotReady"
	// RequestPendingReason: a CertificateRequest waits for its issuer.
	RequestPendingReason = "RequestPending"
	// IssuanceFailedReason: the last CertificateRequest failed; the next
	// attempt waits for the backoff (status.failedIssuanceAttempts,
	// status.lastFailureTime); the message holds the issuer's reason.
	IssuanceFailedReason = "IssuanceFailed"
)

// CertificateRequest reasons.
const (
	// IssuedReason: the request is signed; status.certificate holds it.
	IssuedReason = "Issued"
	// PendingReason: the issuer is working on the request (or waits for it
	// to become Ready).
	PendingReason = "Pending"
	// FailedReason: the issuer tried and failed; the message says why (for
	// ACME, the CA's problem document).
	FailedReason = "Failed"
	// InvalidRequestReason: the CSR or the spec cannot be signed.
	InvalidRequestReason = "InvalidRequest"
	// IssuerPolicyDeniedReason: a ClusterIssuer's policy (spec.policy, or
	// its default for cluster-internal names) does not allow the request's
	// namespace or one of its names; the request is Denied, final, and the
	// message names the name and the rule.
	IssuerPolicyDeniedReason = "IssuerPolicyDenied"
)

// Labels and annotations.
const (
	// CertificateNameAnnotation on a Secret or CertificateRequest names the
	// Certificate it was written for (as cert-manager.io/certificate-name).
	CertificateNameAnnotation = "pki.converge.dev/certificate-name"
	// CertificateNameLabel carries the same name as a label, so that the
	// manager can select (and cache) only the Secrets it issued.
	CertificateNameLabel = "pki.converge.dev/certificate-name"
	// IssuerNameAnnotation, IssuerKindAnnotation and IssuerGroupAnnotation
	// on a Secret record the issuer that signed it.
	IssuerNameAnnotation = "pki.converge.dev/issuer-name"
	// IssuerKindAnnotation records the issuer kind that signed a Secret.
	IssuerKindAnnotation = "pki.converge.dev/issuer-kind"
	// IssuerGroupAnnotation records the issuer group that signed a Secret.
	IssuerGroupAnnotation = "pki.converge.dev/issuer-group"
	// RevisionAnnotation on a CertificateRequest is the Certificate revision
	// it would produce.
	RevisionAnnotation = "pki.converge.dev/certificate-revision"
	// PrivateKeySecretAnnotation on a CertificateRequest names the Secret
	// (same namespace) holding the request's private key; only a
	// selfSigned issuer reads it.
	PrivateKeySecretAnnotation = "pki.converge.dev/private-key-secret-name" //nolint:gosec // an annotation name, not a credential
	// NextPrivateKeyLabel marks the Secrets holding a key for an issuance in
	// progress.
	NextPrivateKeyLabel = "pki.converge.dev/next-private-key"
	// InjectCAFromAnnotation on a webhook configuration, CRD or APIService
	// names <namespace>/<certificate> whose CA bundle is injected.
	InjectCAFromAnnotation = "pki.converge.dev/inject-ca-from"
)
