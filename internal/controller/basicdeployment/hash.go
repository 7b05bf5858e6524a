package basicdeployment

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/rand"

	workloadsv1alpha1 "github.com/converge-dev/converge/api/workloads/v1alpha1"
)

// templateHash is the pod-template-hash of a template: FNV-1a over its JSON
// form (deterministic: struct fields in order, map keys sorted) and the
// collision count, encoded as kube-controller-manager encodes its hashes
// (no vowels, so it never spells a word). The same template always gives
// the same child name, so a stale cache can only ever lead to an
// AlreadyExists, never to a second child.
func templateHash(t *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	b, err := json.Marshal(t)
	if err != nil {
		// A PodTemplateSpec decoded from the API always encodes.
		panic("encoding a pod template: " + err.Error())
	}
	_, _ = h.Write(b)
	if collisionCount != nil {
		var buf [4]byte
		binary.LittleEndian.PutUint32(buf[:], uint32(*collisionCount)) //nolint:gosec // a counter, bit pattern only
		_, _ = h.Write(buf[:])
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// equalIgnoreHash reports whether two templates are equal apart from the
// pod-template-hash label.
func equalIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, workloadsv1alpha1.PodTemplateHashLabel)
	delete(b.Labels, workloadsv1alpha1.PodTemplateHashLabel)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}
