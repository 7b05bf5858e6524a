// Package git fetches revisions of git repositories with go-git (pure Go; no
// git binary needed): a cheap remote listing to resolve a ref to a commit,
// and a shallow clone of exactly that commit when it is new. It knows the
// https, http, ssh, git and file transports and the credentials of a
// GitRepository's secretRef.
package git

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-billy/v5/osfs"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/converge-dev/converge/internal/egress"
)

// Errors callers tell apart (test with errors.Is).
var (
	// ErrAuth: the server refused the credentials, or needs some.
	ErrAuth = errors.New("authentication failed")
	// ErrRefNotFound: the branch, tag, semver range or commit is not in the
	// repository.
	ErrRefNotFound = errors.New("reference not found")
)

// Ref selects a revision; one of Branch, Tag, SemVer or Commit (Commit may
// come with Branch).
type Ref struct {
	Branch, Tag, SemVer, Commit string
}

// Credentials are the keys of a GitRepository's secretRef Secret.
type Credentials map[string][]byte

// Resolved is a ref resolved to a commit.
type Resolved struct {
	// Name is the branch or tag name ("" for a bare commit).
	Name string
	// Hash is the commit's SHA-1.
	Hash string
	// refName is the full reference to clone.
	refName plumbing.ReferenceName
	// commit is set for a commit ref: the history is needed to find it.
	commit bool
}

// Revision is the artifact revision: `<name>@sha1:<hash>` or `sha1:<hash>`.
func (r Resolved) Revision() string {
	if r.Name == "" {
		return "sha1:" + r.Hash
	}
	return r.Name + "@sha1:" + r.Hash
}

// Commit describes a checked-out commit.
type Commit struct {
	Hash    string
	Message string
	Author  string
	Time    time.Time
}

// Client fetches from git servers. The zero value uses the default limits.
type Client struct {
	// MaxFetchSize bounds the bytes a fetch writes (packs and indexes);
	// 0 is DefaultMaxFetchSize.
	MaxFetchSize int64
	// MaxArtifactSize bounds the size of a checkout's files; 0 is
	// DefaultMaxArtifactSize.
	MaxArtifactSize int64
	// Policy bounds the hosts and file:// paths a URL may lead to (the
	// manager's, for tenants' GitRepositories); nil restricts nothing (the
	// CLI, acting as its user).
	Policy *egress.Policy
}

// auth builds the go-git auth method from the Secret's keys: username and
// password (basic), bearerToken, or identity (+ known_hosts) for ssh. The
// returned cleanup removes temporary files.
func auth(url string, creds Credentials) (transport.AuthMethod, func(), error) {
	noop := func() {}
	if len(creds) == 0 {
		return nil, noop, nil
	}
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return nil, noop, fmt.Errorf("parsing the URL: %w", err)
	}
	switch ep.Protocol {
	case "http", "https":
		if tok := creds["bearerToken"]; len(tok) > 0 {
			return &githttp.TokenAuth{Token: string(tok)}, noop, nil
		}
		if u, p := creds["username"], creds["password"]; len(u) > 0 || len(p) > 0 {
			return &githttp.BasicAuth{Username: string(u), Password: string(p)}, noop, nil
		}
		return nil, noop, fmt.Errorf("%w: the secret has neither username/password nor bearerToken", ErrAuth)
	case "ssh":
		key := creds["identity"]
		if len(key) == 0 {
			return nil, noop, fmt.Errorf("%w: the secret has no identity (SSH private key)", ErrAuth)
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		pk, err := gitssh.NewPublicKeys(user, key, string(creds["password"]))
		if err != nil {
			return nil, noop, fmt.Errorf("%w: reading the identity: %w", ErrAuth, err)
		}
		kh := creds["known_hosts"]
		if len(kh) == 0 {
			return nil, noop, fmt.Errorf("%w: the secret has no known_hosts; host keys are always verified", ErrAuth)
		}
		f, err := os.CreateTemp("", "known_hosts-")
		if err != nil {
			return nil, noop, err
		}
		cleanup := func() { _ = os.Remove(f.Name()) }
		if _, err := f.Write(kh); err != nil {
			_ = f.Close()
			cleanup()
			return nil, noop, err
		}
		_ = f.Close()
		cb, err := gitssh.NewKnownHostsCallback(f.Name())
		if err != nil {
			cleanup()
			return nil, noop, fmt.Errorf("%w: parsing known_hosts: %w", ErrAuth, err)
		}
		pk.HostKeyCallback = cb
		return pk, cleanup, nil
	default:
		return nil, noop, nil
	}
}

// classify maps go-git errors to ErrAuth and ErrRefNotFound.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		strings.Contains(err.Error(), "unable to authenticate"), strings.Contains(err.Error(), "handshake failed"):
		return fmt.Errorf("%w: %w", ErrAuth, err)
	case errors.Is(err, plumbing.ErrReferenceNotFound), errors.Is(err, plumbing.ErrObjectNotFound):
		return fmt.Errorf("%w: %w", ErrRefNotFound, err)
	}
	return err
}

// Resolve lists the remote's refs (one round trip, no objects) and resolves
// ref to a commit. A commit ref resolves to itself without a round trip.
func (c Client) Resolve(ctx context.Context, url string, ref Ref, creds Credentials) (Resolved, error) {
	if ref.Commit != "" {
		r := Resolved{Name: ref.Branch, Hash: ref.Commit, commit: true}
		if ref.Branch != "" {
			r.refName = plumbing.NewBranchReferenceName(ref.Branch)
		}
		return r, nil
	}
	ctx, dialURL, proxyOpts, err := c.guard(ctx, url)
	if err != nil {
		return Resolved{}, err
	}
	am, cleanup, err := auth(url, creds)
	defer cleanup()
	if err != nil {
		return Resolved{}, err
	}
	rem := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{dialURL}})
	refs, err := rem.ListContext(ctx, &gogit.ListOptions{Auth: am, PeelingOption: gogit.AppendPeeled, ProxyOptions: proxyOpts})
	if err != nil {
		if errors.Is(err, transport.ErrEmptyRemoteRepository) {
			return Resolved{}, fmt.Errorf("%w: the repository is empty", ErrRefNotFound)
		}
		return Resolved{}, fmt.Errorf("listing remote refs: %w", classify(err))
	}
	byName := map[string]string{}
	for _, r := range refs {
		if r.Type() == plumbing.HashReference {
			byName[r.Name().String()] = r.Hash().String()
		}
	}
	tag := func(name string) (Resolved, bool) {
		full := "refs/tags/" + name
		h, ok := byName[full+"^{}"] // annotated: the peeled commit
		if !ok {
			h, ok = byName[full]
		}
		return Resolved{Name: name, Hash: h, refName: plumbing.ReferenceName(full)}, ok
	}
	switch {
	case ref.Tag != "":
		if r, ok := tag(ref.Tag); ok {
			return r, nil
		}
		return Resolved{}, fmt.Errorf("%w: tag %q", ErrRefNotFound, ref.Tag)
	case ref.SemVer != "":
		c, err := semver.NewConstraint(ref.SemVer)
		if err != nil {
			return Resolved{}, fmt.Errorf("semver range %q: %w", ref.SemVer, err)
		}
		var versions []*semver.Version
		names := map[*semver.Version]string{}
		for full := range byName {
			name, ok := strings.CutPrefix(full, "refs/tags/")
			if !ok || strings.HasSuffix(name, "^{}") {
				continue
			}
			v, err := semver.NewVersion(name)
			if err != nil || !c.Check(v) {
				continue
			}
			versions = append(versions, v)
			names[v] = name
		}
		if len(versions) == 0 {
			return Resolved{}, fmt.Errorf("%w: no tag matches semver range %q", ErrRefNotFound, ref.SemVer)
		}
		sort.Sort(semver.Collection(versions))
		r, _ := tag(names[versions[len(versions)-1]])
		return r, nil
	default:
		branch := ref.Branch
		if branch == "" {
			branch = "main"
		}
		full := plumbing.NewBranchReferenceName(branch)
		if h, ok := byName[full.String()]; ok {
			return Resolved{Name: branch, Hash: h, refName: full}, nil
		}
		return Resolved{}, fmt.Errorf("%w: branch %q", ErrRefNotFound, branch)
	}
}

// Checkout fetches the resolved commit into dir (which must be empty) and
// writes its files there, without .git. Branches and tags are fetched with
// depth 1; a commit is fetched with its branch's history (servers rarely
// allow fetching an arbitrary commit). The fetch writes at most
// MaxFetchSize bytes; the commit's files are summed from the tree (blob
// sizes are known without reading a blob) and refused before any is written
// when they exceed MaxArtifactSize. Directories are created 0700, files
// 0600, through an os.Root on dir.
func (c Client) Checkout(ctx context.Context, url string, r Resolved, creds Credentials, dir string) (Commit, error) {
	ctx, dialURL, proxyOpts, err := c.guard(ctx, url)
	if err != nil {
		return Commit{}, err
	}
	am, cleanup, err := auth(url, creds)
	defer cleanup()
	if err != nil {
		return Commit{}, err
	}
	gitDir := filepath.Join(dir, ".git")
	if err := os.Mkdir(gitDir, 0o700); err != nil {
		return Commit{}, fmt.Errorf("creating the git directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(gitDir) }()
	lfs := newLimitFS(osfs.New(gitDir, osfs.WithBoundOS()), c.maxFetch(), c.maxArtifact())
	// Objects larger than 1 MiB are streamed from the pack, never held.
	st := filesystem.NewStorageWithOptions(lfs, cache.NewObjectLRU(16*cache.MiByte),
		filesystem.Options{LargeObjectThreshold: 1 << 20})
	opts := &gogit.CloneOptions{URL: dialURL, Auth: am, Tags: gogit.NoTags, ReferenceName: r.refName,
		SingleBranch: r.refName != "", NoCheckout: true, ProxyOptions: proxyOpts}
	if !r.commit {
		opts.Depth = 1
	}
	repo, err := gogit.CloneContext(ctx, st, nil, opts)
	if err != nil {
		if lerr := lfs.err(); lerr != nil {
			return Commit{}, lerr
		}
		return Commit{}, fmt.Errorf("cloning: %w", classify(err))
	}
	h := plumbing.NewHash(r.Hash)
	if r.Hash == "" {
		head, err := repo.Head()
		if err != nil {
			return Commit{}, fmt.Errorf("reading HEAD: %w", err)
		}
		h = head.Hash()
	}
	co, err := repo.CommitObject(h)
	if err != nil {
		return Commit{}, fmt.Errorf("reading commit %s: %w", h, classify(err))
	}
	if err := c.writeTree(ctx, co, dir); err != nil {
		return Commit{}, err
	}
	return Commit{
		Hash:    co.Hash.String(),
		Message: strings.TrimSpace(co.Message),
		Author:  fmt.Sprintf("%s <%s>", co.Author.Name, co.Author.Email),
		Time:    co.Author.When,
	}, nil
}

// maxSymlinkTarget bounds a symlink's target (PATH_MAX).
const maxSymlinkTarget = 4096

// writeTree writes the files of co into dir: sizes first, then content.
func (c Client) writeTree(ctx context.Context, co *object.Commit, dir string) error {
	tree, err := co.Tree()
	if err != nil {
		return fmt.Errorf("reading the tree of %s: %w", co.Hash, err)
	}
	var total int64
	err = tree.Files().ForEach(func(f *object.File) error {
		total += f.Size
		if total > c.maxArtifact() {
			return &SizeError{What: "the files of commit " + co.Hash.String() + " (at " + f.Name + ")", Limit: c.maxArtifact(), Value: total}
		}
		return nil
	})
	if err != nil {
		var se *SizeError
		if errors.As(err, &se) {
			return err
		}
		return fmt.Errorf("reading the tree of %s: %w", co.Hash, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("opening the checkout directory: %w", err)
	}
	defer root.Close()
	return tree.Files().ForEach(func(f *object.File) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		first, _, _ := strings.Cut(f.Name, "/")
		if strings.EqualFold(first, ".git") {
			return fmt.Errorf("the tree has a path %q inside .git", f.Name)
		}
		name := filepath.FromSlash(f.Name)
		if d := filepath.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o700); err != nil {
				return fmt.Errorf("writing %s: %w", f.Name, err)
			}
		}
		if f.Mode == filemode.Symlink {
			if f.Size > maxSymlinkTarget {
				return fmt.Errorf("writing %s: symlink target of %d bytes", f.Name, f.Size)
			}
			target, err := f.Contents()
			if err != nil {
				return fmt.Errorf("reading %s: %w", f.Name, err)
			}
			// The target is not checked here: renders refuse a link
			// leaving the artifact when they meet it.
			if err := root.Symlink(target, name); err != nil {
				return fmt.Errorf("writing %s: %w", f.Name, err)
			}
			return nil
		}
		return writeBlob(root, name, f)
	})
}

func writeBlob(root *os.Root, name string, f *object.File) error {
	rd, err := f.Reader()
	if err != nil {
		return fmt.Errorf("reading %s: %w", f.Name, err)
	}
	defer rd.Close()
	out, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", f.Name, err)
	}
	// The size was counted from the tree: never write more.
	_, err = io.Copy(out, io.LimitReader(rd, f.Size))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", f.Name, err)
	}
	return nil
}
