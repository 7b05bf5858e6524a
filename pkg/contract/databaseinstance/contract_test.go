package databaseinstance

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func obj(status map[string]any, gen int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetGeneration(gen)
	return u
}

func TestRead(t *testing.T) {
	full := map[string]any{
		"ready": true, "observedGeneration": int64(2), "engine": "postgres", "version": "15.4",
		"endpoint":       map[string]any{"host": "db", "port": int64(5432)},
		"adminSecretRef": map[string]any{"name": "admin"},
	}
	s, err := Read(obj(full, 2))
	if err != nil || !s.Ready || s.Host != "db" || s.Port != 5432 || s.Engine != "postgres" || s.AdminSecretName != "admin" {
		t.Fatalf("Read(full) = %+v, %v", s, err)
	}
	s, err = Read(obj(full, 3))
	if err != nil || s.Ready || !s.Stale {
		t.Fatalf("a lagging observedGeneration must not be ready: %+v, %v", s, err)
	}
	s, err = Read(obj(map[string]any{"ready": false}, 1))
	if err != nil || s.Ready {
		t.Fatalf("Read(not ready) = %+v, %v", s, err)
	}
	s, err = Read(obj(map[string]any{}, 1))
	if err != nil || s.Ready {
		t.Fatalf("Read(empty) = %+v, %v", s, err)
	}
	bad := map[string]any{"ready": true, "observedGeneration": int64(1), "engine": "oracle"}
	if _, err := Read(obj(bad, 1)); !IsViolation(err) {
		t.Fatalf("Read(bad) = %v, want a violation", err)
	}
	if _, err := Read(obj(map[string]any{"ready": "yes"}, 1)); !IsViolation(err) {
		t.Fatalf("Read(ready: string) = %v, want a violation", err)
	}
}
