package testenv

import (
	"net"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// UnreachableClient is a real client (of a scheme built by addToScheme)
// whose API server is gone: every request fails with "connection refused".
// It is for tests of what a component does when the API server cannot
// answer (a webhook must refuse, not admit unchecked).
func UnreachableClient(t testing.TB, addToScheme func(*runtime.Scheme) error) client.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := "http://" + l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s := runtime.NewScheme()
	if err := addToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(&rest.Config{Host: host}, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
