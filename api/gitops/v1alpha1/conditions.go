package v1alpha1

// Condition types of the gitops API. Ready is the summary; Reconciling and
// Stalled follow the kstatus convention and are present only while True.
const (
	// ReadyCondition summarises the object: True when the last reconciliation
	// succeeded (GitRepository: the artifact is fetched; Sync: the revision is
	// applied, pruned and, with wait, healthy).
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while work is in progress.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when progress needs a change by the user (a
	// spec, a commit or a credential); the controller does not retry until
	// something changes.
	StalledCondition = "Stalled"
	// HealthyCondition (Sync only) is True when every applied object passed
	// its health check; present only with spec.wait or spec.healthChecks.
	HealthyCondition = "Healthy"
	// PruneHeldCondition (Sync only) is True while a prune larger than
	// spec.pruneLimit waits for approval; status.pendingPrune lists it.
	PruneHeldCondition = "PruneHeld"
)

// Condition reasons of the gitops API.
const (
	// SucceededReason: the reconciliation succeeded.
	SucceededReason = "Succeeded"
	// ProgressingReason: work is in progress.
	ProgressingReason = "Progressing"
	// InvalidSpecReason: the spec cannot be acted on (for objects stored
	// before a webhook rule existed).
	InvalidSpecReason = "InvalidSpec"

	// AuthenticationFailedReason: the git server refused the credentials, or
	// the secretRef Secret is missing or malformed.
	AuthenticationFailedReason = "AuthenticationFailed"
	// GitOperationFailedReason: a clone or fetch failed (network, unknown
	// ref, ...); the message carries the git error.
	GitOperationFailedReason = "GitOperationFailed"
	// URLNotAllowedReason: the manager may not reach spec.url — a file://
	// path outside --git-file-roots, or a host whose address the cluster
	// admin denies (--egress-denied-cidrs: loopback, link-local and the
	// metadata addresses by default). Nothing was read or dialled; the
	// GitRepository is Stalled until its URL or the manager's flags change.
	URLNotAllowedReason = "URLNotAllowed"
	// RefNotFoundReason: the branch, tag, semver range or commit does not
	// exist in the repository.
	RefNotFoundReason = "RefNotFound"

	// SourceNotReadyReason: the GitRepository has no artifact yet.
	SourceNotReadyReason = "SourceNotReady"
	// ArtifactFailedReason: the GitRepository failed; nothing is applied or
	// pruned.
	ArtifactFailedReason = "ArtifactFailed"
	// AccessDeniedReason: the reference crosses namespaces and the manager
	// does not allow it.
	AccessDeniedReason = "AccessDenied"
	// PathNotFoundReason: spec.path does not exist in the revision.
	PathNotFoundReason = "PathNotFound"
	// BuildFailedReason: rendering failed (invalid YAML, kustomize error);
	// the message names the file and line.
	BuildFailedReason = "BuildFailed"
	// RenderRefusedReason: the render tried to read outside its artifact
	// (an absolute path, a ".." escape, a symlink leaving the repository)
	// or to use the network (a URL, a remote base); the message names the
	// file and the field. Nothing is applied or pruned.
	RenderRefusedReason = "RenderRefused"
	// RenderLimitExceededReason: the render exceeded a bound of the manager
	// (objects rendered, size of a file, render time); the message names
	// the number and the limit. Nothing is applied or pruned.
	RenderLimitExceededReason = "RenderLimitExceeded"
	// ArtifactTooLargeReason (GitRepository): the fetch received more bytes
	// than the manager's fetch limit, or the revision's files add up to
	// more than its artifact limit (checked before any file is written);
	// the message names the number and the limit.
	ArtifactTooLargeReason = "ArtifactTooLarge"
	// EmptyRenderReason: the path renders no object; nothing is applied and,
	// to protect against a broken commit, nothing is pruned.
	EmptyRenderReason = "EmptyRender"
	// ApplyFailedReason: the API server refused an object; the message names
	// it. Nothing is pruned.
	ApplyFailedReason = "ApplyFailed"
	// PruneFailedReason: deleting a stale object failed; it stays in the
	// inventory and is retried.
	PruneFailedReason = "PruneFailed"
	// PruneLimitExceededReason: the revision would prune more than
	// spec.pruneLimit of the inventory; see status.pendingPrune.
	PruneLimitExceededReason = "PruneLimitExceeded"
	// DependencyNotReadyReason: an object in spec.dependsOn is missing or
	// its ready expression is not yet true.
	DependencyNotReadyReason = "DependencyNotReady"
	// HealthCheckFailedReason: an applied object failed its health check or
	// did not become healthy within spec.timeout.
	HealthCheckFailedReason = "HealthCheckFailed"
	// WaitingForHealthReason: applied objects are not healthy yet.
	WaitingForHealthReason = "WaitingForHealth"
	// DeletingReason: the Sync is being deleted and prunes its inventory.
	DeletingReason = "Deleting"
	// ServiceAccountRequiredReason: the manager runs in lockdown
	// (--gitops-lockdown) without a default service account, and the Sync
	// names none; it never acts as the manager. Set spec.serviceAccountName
	// to a ServiceAccount of the Sync's namespace that holds the rights the
	// Sync needs.
	ServiceAccountRequiredReason = "ServiceAccountRequired"
	// ReadForbiddenReason: the identity the Sync acts as may not read an
	// object the Sync must read (a dependency, an applied object's health,
	// an object to prune); the message names the object, the verb and the
	// identity. Nothing about the object is evaluated or reported.
	ReadForbiddenReason = "ReadForbidden"
	// UnknownKindReason: the revision holds objects of a kind the API
	// server does not serve and no CustomResourceDefinition of the same
	// revision defines; the message names the kind and the file. Nothing is
	// applied or pruned; the Sync retries every retryInterval, so it
	// recovers once the kind is installed.
	UnknownKindReason = "UnknownKind"
)

// Annotations and labels of the gitops API.
const (
	// ReconcileRequestAnnotation, set to any new value (the CLI writes the
	// time), asks for an immediate reconciliation, as Flux's
	// reconcile.fluxcd.io/requestedAt.
	ReconcileRequestAnnotation = "converge.dev/reconcile-requested-at"
	// ApprovePruneAnnotation on a Sync approves a prune held by pruneLimit
	// for exactly the revision given as its value.
	ApprovePruneAnnotation = "converge.dev/approve-prune"
	// PruneAnnotation set to PruneDisabled on an applied object keeps it
	// when it is removed from git or when its Sync is deleted.
	PruneAnnotation = "converge.dev/prune"
	// PruneDisabled is the value of PruneAnnotation that opts out of pruning.
	PruneDisabled = "disabled"
	// SyncNameLabel and SyncNamespaceLabel are set on every applied object
	// and name the Sync that applied it.
	SyncNameLabel = "gitops.converge.dev/sync-name"
	// SyncNamespaceLabel: see SyncNameLabel.
	SyncNamespaceLabel = "gitops.converge.dev/sync-namespace"
	// SyncFinalizer lets a Sync prune its inventory before it goes.
	SyncFinalizer = "gitops.converge.dev/sync"
)
