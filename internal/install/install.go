// Package install applies Converge's CRDs and webhook configurations to a
// cluster with server-side apply, and waits until the CRDs are established.
// Local mode (`converge up`) and the test harness use it; in clusters the
// Helm chart and kustomize bases ship the same generated manifests.
package install

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/config"
)

// FieldManager is the server-side apply field manager of installs.
const FieldManager = "converge-install"

// Names of the webhook configurations, as the kustomize bases and the Helm
// chart name them too.
const (
	MutatingWebhookConfigurationName   = "converge-mutating-webhook-configuration"
	ValidatingWebhookConfigurationName = "converge-validating-webhook-configuration"
)

// CRDs returns the embedded CustomResourceDefinitions.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(config.Manifests, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := config.Manifests.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", f, err)
		}
		crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		out = append(out, crd)
	}
	return out, nil
}

// WebhookConfigurations returns the generated webhook configurations, named
// as installed, with every clientConfig pointing at url+path and trusting
// caBundle. An empty url keeps the generated service reference.
func WebhookConfigurations(url string, caBundle []byte) ([]*admissionregistrationv1.MutatingWebhookConfiguration, []*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	data, err := config.Manifests.ReadFile(path.Join("webhook", "manifests.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var muts []*admissionregistrationv1.MutatingWebhookConfiguration
	var vals []*admissionregistrationv1.ValidatingWebhookConfiguration
	rewrite := func(cc *admissionregistrationv1.WebhookClientConfig) {
		cc.CABundle = caBundle
		if url == "" || cc.Service == nil {
			return
		}
		u := strings.TrimSuffix(url, "/")
		if cc.Service.Path != nil {
			u += *cc.Service.Path
		}
		cc.URL = &u
		cc.Service = nil
	}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading webhook manifests: %w", err)
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, err
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, m); err != nil {
				return nil, nil, err
			}
			m.Name = MutatingWebhookConfigurationName
			for i := range m.Webhooks {
				rewrite(&m.Webhooks[i].ClientConfig)
			}
			muts = append(muts, m)
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				return nil, nil, err
			}
			v.Name = ValidatingWebhookConfigurationName
			for i := range v.Webhooks {
				rewrite(&v.Webhooks[i].ClientConfig)
			}
			vals = append(vals, v)
		}
	}
	return muts, vals, nil
}

// ManifestHashAnnotation records the hash of the manifest a CRD was applied
// from, so that an unchanged CRD is not applied again.
const ManifestHashAnnotation = "install.converge.dev/manifest-sha256"

func manifestHash(obj client.Object) (string, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", obj.GetName(), err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// Options tune Apply.
type Options struct {
	// WebhookURL is where the API server reaches the manager's webhook server
	// (local mode: https://127.0.0.1:PORT). Empty skips the webhook
	// configurations.
	WebhookURL string
	// CABundle is the CA that signed the webhook serving certificate.
	CABundle []byte
	// Timeout bounds the wait for the CRDs to be established. Default 30s.
	Timeout time.Duration
}

// Apply installs the CRDs and, with a WebhookURL, the webhook configurations.
func Apply(ctx context.Context, c client.Client, o Options) error {
	if err := ApplyCRDs(ctx, c, o.Timeout); err != nil {
		return err
	}
	if o.WebhookURL == "" {
		return nil
	}
	return ApplyWebhooks(ctx, c, o.WebhookURL, o.CABundle)
}

// ApplyCRDs installs the CRDs and waits until they are established (a zero
// timeout waits 30s).
func ApplyCRDs(ctx context.Context, c client.Client, timeout time.Duration) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		hash, err := manifestHash(crd)
		if err != nil {
			return err
		}
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, live); err == nil && live.Annotations[ManifestHashAnnotation] == hash {
			continue // unchanged: skip re-sending hundreds of kilobytes of schema
		}
		if crd.Annotations == nil {
			crd.Annotations = map[string]string{}
		}
		crd.Annotations[ManifestHashAnnotation] = hash
		if err := apply(ctx, c, crd); err != nil {
			return fmt.Errorf("applying CRD %s: %w", crd.Name, err)
		}
	}
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return waitEstablished(ctx, c, crds, timeout)
}

// ApplyWebhooks installs the webhook configurations, pointing at url and
// trusting caBundle.
func ApplyWebhooks(ctx context.Context, c client.Client, url string, caBundle []byte) error {
	muts, vals, err := WebhookConfigurations(url, caBundle)
	if err != nil {
		return err
	}
	for _, m := range muts {
		m.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"))
		if err := apply(ctx, c, m); err != nil {
			return fmt.Errorf("applying %s: %w", m.Name, err)
		}
	}
	for _, v := range vals {
		v.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"))
		if err := apply(ctx, c, v); err != nil {
			return fmt.Errorf("applying %s: %w", v.Name, err)
		}
	}
	return nil
}

func apply(ctx context.Context, c client.Client, obj client.Object) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	raw, err := yaml.Marshal(u)
	if err != nil {
		return err
	}
	return c.Patch(ctx, obj, client.RawPatch(types.ApplyYAMLPatchType, raw), client.FieldOwner(FieldManager), client.ForceOwnership)
}

func waitEstablished(ctx context.Context, c client.Client, crds []*apiextensionsv1.CustomResourceDefinition, timeout time.Duration) error {
	for _, want := range crds {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: want.Name}, got); err != nil {
				last = err.Error()
				return false, nil //nolint:nilerr // keep polling until the timeout
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
				if cond.Type == apiextensionsv1.NamesAccepted && cond.Status == apiextensionsv1.ConditionFalse {
					last = cond.Message
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established after %s (%s): %w", want.Name, timeout, last, err)
		}
	}
	return nil
}
