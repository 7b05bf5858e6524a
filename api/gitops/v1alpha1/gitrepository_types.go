package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GitRepositorySpec is the desired state of a GitRepository.
type GitRepositorySpec struct {
	// url is the repository address, with an https, http, ssh, git or file
	// scheme (for example https://github.com/org/repo.git,
	// ssh://git@github.com/org/repo.git or file:///srv/git/repo.git).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|ssh|git|file)://`
	URL string `json:"url"`

	// ref selects the revision: one of branch, tag, semver or commit
	// (commit may be combined with branch, to fetch only that branch).
	// Defaults to the branch "main".
	// +optional
	Ref *GitRepositoryRef `json:"ref,omitempty"`

	// interval is how often the remote is checked for a new revision.
	// Defaults to 1m. A push webhook or the converge.dev/reconcile-requested-at
	// annotation triggers a check at once.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// timeout bounds one fetch. Defaults to 60s.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// secretRef names a Secret in the same namespace with the credentials:
	// `username` and `password` (basic auth), `bearerToken`, or `identity`
	// (an SSH private key) with `known_hosts`.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// ignore holds .gitignore-style patterns, one per line, of files left
	// out of the artifact (the .git directory is always left out).
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Ignore string `json:"ignore,omitempty"`

	// suspend stops fetching; the last artifact stays available.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// GitRepositoryRef selects a git revision.
type GitRepositoryRef struct {
	// branch to follow, for example main.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Branch string `json:"branch,omitempty"`

	// tag to check out, for example v1.2.3.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Tag string `json:"tag,omitempty"`

	// semver is a range (for example ">=1.0.0 <2.0.0"); the highest tag in
	// the range is checked out.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	SemVer string `json:"semver,omitempty"`

	// commit is a full SHA-1 to check out.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{40}$`
	Commit string `json:"commit,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Artifact is a fetched revision.
type Artifact struct {
	// revision is `<ref>@sha1:<hash>`, for example main@sha1:1f2e..., or
	// `sha1:<hash>` for a bare commit.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Revision string `json:"revision"`

	// message is the commit message, truncated to 1024 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// author is the commit author, as "Name <email>".
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Author string `json:"author,omitempty"`

	// commitTime is when the commit was made.
	// +optional
	CommitTime *metav1.Time `json:"commitTime,omitempty"`

	// lastUpdateTime is when this revision was fetched.
	// +required
	LastUpdateTime metav1.Time `json:"lastUpdateTime"`

	// digest is a sha256 over the artifact's files (after ignore), so a change
	// of ignore rules is seen even for the same commit.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Digest string `json:"digest,omitempty"`
}

// GitRepositoryStatus is the observed state of a GitRepository.
type GitRepositoryStatus struct {
	// observedGeneration is the generation last fully reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, and Reconciling and Stalled while True.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// artifact is the last revision fetched.
	// +optional
	Artifact *Artifact `json:"artifact,omitempty"`

	// lastHandledReconcileAt is the last value of the
	// converge.dev/reconcile-requested-at annotation acted on.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gitrepo,categories={converge,gitops}
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.artifact.revision`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GitRepository fetches a revision of a git repository and keeps it
// available, in the manager, to the Syncs that reference it.
type GitRepository struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec GitRepositorySpec `json:"spec"`

	// status is the observed state.
	// +optional
	// +kubebuilder:default:={"observedGeneration":-1}
	Status GitRepositoryStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GitRepositoryList is a list of GitRepositories.
type GitRepositoryList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the GitRepositories.
	Items []GitRepository `json:"items"`
}

// GetConditions returns the conditions, for the conditions helpers.
func (r *GitRepository) GetConditions() []metav1.Condition { return r.Status.Conditions }

// SetConditions sets the conditions, for the conditions helpers.
func (r *GitRepository) SetConditions(c []metav1.Condition) { r.Status.Conditions = c }
