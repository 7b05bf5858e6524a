package bmc

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// The server runs on the leader only, and serves nothing before it runs
// (a standby replica answers for no BMC).
func TestLeaderOnly(t *testing.T) {
	s := &Server{}
	if !s.NeedLeaderElection() {
		t.Fatal("the BMC server must run on the leader only")
	}
	_, err := s.Ensure(types.NamespacedName{Namespace: "ns", Name: "b"}, Config{IPMI: true, Redfish: true, User: "u", Password: "p"})
	if !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Ensure before Start = %v, want ErrNotStarted", err)
	}
	if s.Len() != 0 {
		t.Fatal("a BMC is served before the server runs")
	}
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                          "busybox",
		"http://images.example/debian.iso": "debian",
		"https://x/a/b/c-1.2.img?x=y":      "c-1.2",
	} {
		if got, err := ImageName(in); err != nil || got != want {
			t.Errorf("ImageName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "http://x/", "Upper", "http://x/a%20b.iso", "../etc"} {
		if got, err := ImageName(in); err == nil {
			t.Errorf("ImageName(%q) = %q, want an error", in, got)
		}
	}
}
