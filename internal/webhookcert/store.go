package webhookcert

import (
	"bytes"
	"context"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Store persists a Bundle.
type Store interface {
	// Load returns the stored bundle, or nil if there is none.
	Load(ctx context.Context) (*Bundle, error)
	// Save replaces the stored bundle. It fails with a conflict when the
	// store changed since the Load that returned prev.
	Save(ctx context.Context, prev, next *Bundle) error
	// Changes signals when the stored bundle may have changed; nil if the
	// store cannot tell.
	Changes() <-chan struct{}
	// Describe names the store in messages.
	Describe() string
}

// Secret keys.
const (
	keyCACert = "ca.crt"
	keyCAKey  = "ca.key"
	keyCert   = corev1.TLSCertKey
	keyKey    = corev1.TLSPrivateKeyKey
)

// DirStore keeps the bundle as ca.crt, ca.key, tls.crt and tls.key in Dir.
type DirStore struct {
	// Dir is the directory.
	Dir string
}

var _ Store = DirStore{}

// Load implements Store.
func (s DirStore) Load(context.Context) (*Bundle, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(s.Dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	var b Bundle
	var err error
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{keyCACert, &b.CACert}, {keyCAKey, &b.CAKey}, {keyCert, &b.Cert}, {keyKey, &b.Key}} {
		if *f.dst, err = read(f.name); err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.name, err)
		}
	}
	if b.Cert == nil && b.CACert == nil {
		return nil, nil
	}
	return &b, nil
}

// Save implements Store. Files are replaced one by one through renames; the
// key is written before its certificate. Every file is 0600 (the directory
// lives in a data directory only its owner may read).
func (s DirStore) Save(_ context.Context, _, next *Bundle) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", s.Dir, err)
	}
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{{keyCAKey, next.CAKey, 0o600}, {keyCACert, next.CACert, 0o600}, {keyKey, next.Key, 0o600}, {keyCert, next.Cert, 0o600}} {
		p := filepath.Join(s.Dir, f.name)
		if err := os.WriteFile(p+".tmp", f.data, f.perm); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
	}
	return nil
}

// Changes implements Store.
func (DirStore) Changes() <-chan struct{} { return nil }

// Describe implements Store.
func (s DirStore) Describe() string { return "directory " + s.Dir }

// SecretStore keeps the bundle in a Secret (type kubernetes.io/tls, with
// ca.crt and, when self-managed, ca.key) and watches it.
type SecretStore struct {
	// Client reads and writes the Secret.
	Client kubernetes.Interface
	// Namespace and Name locate the Secret.
	Namespace, Name string

	changes  chan struct{}
	informer toolscache.SharedIndexInformer
}

// NewSecretStore returns a store for one Secret. Run must be called to
// receive change notifications.
func NewSecretStore(cs kubernetes.Interface, namespace, name string) *SecretStore {
	s := &SecretStore{Client: cs, Namespace: namespace, Name: name, changes: make(chan struct{}, 1)}
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return cs.CoreV1().Secrets(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return cs.CoreV1().Secrets(namespace).Watch(ctx, o)
		},
	}
	s.informer = toolscache.NewSharedIndexInformer(lw, &corev1.Secret{}, 10*time.Minute, toolscache.Indexers{})
	notify := func(any) {
		select {
		case s.changes <- struct{}{}:
		default:
		}
	}
	_, _ = s.informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { notify(n) },
		DeleteFunc: notify,
	})
	return s
}

var _ Store = &SecretStore{}

// Run watches the Secret until ctx is done.
func (s *SecretStore) Run(ctx context.Context) { s.informer.RunWithContext(ctx) }

// Load implements Store; it reads from the API server, not the watch cache,
// so that a Save right after sees the latest resourceVersion.
func (s *SecretStore) Load(ctx context.Context) (*Bundle, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if len(sec.Data[keyCert]) == 0 && len(sec.Data[keyCACert]) == 0 {
		return nil, nil
	}
	return &Bundle{CACert: sec.Data[keyCACert], CAKey: sec.Data[keyCAKey], Cert: sec.Data[keyCert], Key: sec.Data[keyKey]}, nil
}

// Save implements Store, with optimistic concurrency: it fails with a
// conflict if the Secret no longer holds prev.
func (s *SecretStore) Save(ctx context.Context, prev, next *Bundle) error {
	data := map[string][]byte{keyCACert: next.CACert, keyCAKey: next.CAKey, keyCert: next.Cert, keyKey: next.Key}
	secrets := s.Client.CoreV1().Secrets(s.Namespace)
	cur, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "converge"}},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}
		_, err = secrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: "converge-webhookcert"})
		return err
	}
	if err != nil {
		return err
	}
	var curCert []byte
	if cur.Data != nil {
		curCert = cur.Data[keyCert]
	}
	var prevCert []byte
	if prev != nil {
		prevCert = prev.Cert
	}
	if !bytes.Equal(curCert, prevCert) {
		return apierrors.NewConflict(corev1.Resource("secrets"), s.Name, errors.New("the Secret changed since it was read"))
	}
	cur.Data = data
	_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "converge-webhookcert"})
	return err
}

// Changes implements Store.
func (s *SecretStore) Changes() <-chan struct{} { return s.changes }

// Describe implements Store.
func (s *SecretStore) Describe() string { return "Secret " + s.Namespace + "/" + s.Name }

// CASecretStore keeps a CA alone (no serving certificate: whoever uses it
// issues those in memory) in a Secret of type kubernetes.io/tls: tls.crt
// and ca.crt hold the CA certificate, tls.key its key. It is create-only:
// Save creates the Secret and never writes one that exists, so of several
// managers creating it at once one wins and the others, whose Save fails
// with AlreadyExists, load the winner's (LoadOrCreateCA).
type CASecretStore struct {
	// Reader reads the Secret; Writer creates it.
	Reader client.Reader
	Writer client.Writer
	// Key locates the Secret.
	Key types.NamespacedName
	// Labels are set on the Secret created.
	Labels map[string]string
}

var _ Store = &CASecretStore{}

// Load implements Store: nil when the Secret does not exist, a bundle with
// whatever it holds (maybe nothing) when it does.
func (s *CASecretStore) Load(ctx context.Context) (*Bundle, error) {
	sec := &corev1.Secret{}
	if err := s.Reader.Get(ctx, s.Key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", s.Describe(), err)
	}
	return &Bundle{CACert: sec.Data[keyCert], CAKey: sec.Data[keyKey]}, nil
}

// Save implements Store: it creates the Secret with next's CA, and refuses
// to replace one (prev not nil). A Secret that exists already fails the
// create with AlreadyExists, returned as is.
func (s *CASecretStore) Save(ctx context.Context, prev, next *Bundle) error {
	if prev != nil {
		return fmt.Errorf("%s is create-only: it is never replaced", s.Describe())
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Key.Namespace, Name: s.Key.Name, Labels: s.Labels},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{keyCert: next.CACert, keyKey: next.CAKey, keyCACert: next.CACert},
	}
	if err := s.Writer.Create(ctx, sec); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return err
		}
		return fmt.Errorf("creating %s: %w", s.Describe(), err)
	}
	return nil
}

// Changes implements Store: the store does not watch.
func (*CASecretStore) Changes() <-chan struct{} { return nil }

// Describe implements Store.
func (s *CASecretStore) Describe() string { return "Secret " + s.Key.String() }

// LoadOrCreateCA returns the CA kept in s, saving a new one (NewCA with
// subject) when s holds none. When another writer saved one first (Save
// fails with AlreadyExists), that one is loaded and returned, so every
// caller ends with the same CA. A store holding no valid CA is an error: it
// is never replaced. created says whether this call saved the CA.
func LoadOrCreateCA(ctx context.Context, s Store, subject pkix.Name, now time.Time) (b *Bundle, created bool, err error) {
	b, err = s.Load(ctx)
	if err != nil {
		return nil, false, err
	}
	if b == nil {
		next, err := NewCA(subject, now)
		if err != nil {
			return nil, false, err
		}
		err = s.Save(ctx, nil, next)
		if err == nil {
			return next, true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, err
		}
		// Another writer saved one first: use it.
		if b, err = s.Load(ctx); err != nil {
			return nil, false, err
		}
		if b == nil {
			return nil, false, fmt.Errorf("%s was created by another writer, then deleted", s.Describe())
		}
	}
	if err := b.CheckCA(); err != nil {
		return nil, false, fmt.Errorf("%s holds no valid CA (delete it to have a new one made): %w", s.Describe(), err)
	}
	return b, false, nil
}
