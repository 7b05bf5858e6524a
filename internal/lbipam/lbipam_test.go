package lbipam_test

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lbv1alpha1 "github.com/converge-dev/converge/api/lb/v1alpha1"
	"github.com/converge-dev/converge/internal/lbipam"
)

func pool(t *testing.T, name string, addrs []string, as ...lbv1alpha1.Assignment) lbipam.Pool {
	t.Helper()
	rs, err := lbipam.ParseAddresses(addrs)
	if err != nil {
		t.Fatal(err)
	}
	p := &lbv1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lbv1alpha1.IPAddressPoolSpec{Addresses: addrs}}
	p.Status.Assignments = as
	return lbipam.Pool{Obj: p, Ranges: rs}
}

func held(addr, ns, name, key string, ports ...string) lbv1alpha1.Assignment {
	return lbv1alpha1.Assignment{Address: addr, Service: lbv1alpha1.ServiceRef{Namespace: ns, Name: name, UID: types.UID("u-" + name)}, SharingKey: key, Ports: ports}
}

func TestParseAddresses(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		ok   bool
		size int64
	}{
		{[]string{"10.0.0.0/30"}, true, 4},
		{[]string{"10.0.0.1-10.0.0.3", "10.0.1.0/32"}, true, 4},
		{[]string{"10.0.0.1/30"}, false, 0},
		{[]string{"10.0.0.0/30", "10.0.0.2-10.0.0.9"}, false, 0},
		{[]string{"fd00::/64"}, false, 0},
		{[]string{"10.0.0.5-10.0.0.1"}, false, 0},
	} {
		rs, err := lbipam.ParseAddresses(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%v: err=%v", tc.in, err)
			continue
		}
		if tc.ok && lbipam.Size(rs, false) != tc.size {
			t.Errorf("%v: size %d, want %d", tc.in, lbipam.Size(rs, false), tc.size)
		}
	}
	rs, _ := lbipam.ParseAddresses([]string{"10.0.0.0/24"})
	if got := lbipam.Size(rs, true); got != 254 {
		t.Errorf("avoidBuggyIPs size %d, want 254", got)
	}
}

func TestAllocate(t *testing.T) {
	req := lbipam.Request{Namespace: "ns", Name: "new", UID: "u-new", Ports: []string{"TCP/80"}}
	for _, tc := range []struct {
		name   string
		req    func(r *lbipam.Request)
		pools  []lbipam.Pool
		addr   string
		reason string
	}{
		{name: "first free", pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.0", "ns", "x", ""))}, addr: "10.0.0.1"},
		{name: "exhausted", pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/32"}, held("10.0.0.0", "ns", "x", ""))}, reason: lbv1alpha1.PoolExhaustedReason},
		{name: "requested free", req: func(r *lbipam.Request) { r.Address = netip.MustParseAddr("10.0.0.3") },
			pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"})}, addr: "10.0.0.3"},
		{name: "requested taken", req: func(r *lbipam.Request) { r.Address = netip.MustParseAddr("10.0.0.0") },
			pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.0", "ns", "x", ""))}, reason: lbv1alpha1.AddressUnavailableReason},
		{name: "requested outside", req: func(r *lbipam.Request) { r.Address = netip.MustParseAddr("10.9.0.0") },
			pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"})}, reason: lbv1alpha1.AddressUnavailableReason},
		{name: "share by key", req: func(r *lbipam.Request) { r.SharingKey = "k" },
			pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.2", "ns", "x", "k", "TCP/443"))}, addr: "10.0.0.2"},
		{name: "no share across namespaces", req: func(r *lbipam.Request) { r.SharingKey = "k"; r.Address = netip.MustParseAddr("10.0.0.2") },
			pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.2", "other", "x", "k", "TCP/443"))}, reason: lbv1alpha1.AddressUnavailableReason},
		{name: "no share on colliding port", req: func(r *lbipam.Request) { r.SharingKey = "k"; r.Address = netip.MustParseAddr("10.0.0.2") },
			pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.2", "ns", "x", "k", "TCP/80"))}, reason: lbv1alpha1.AddressUnavailableReason},
		{name: "pool not granted", req: func(r *lbipam.Request) { r.Pool = "p" },
			pools: []lbipam.Pool{func() lbipam.Pool {
				p := pool(t, "p", []string{"10.0.0.0/30"})
				p.Obj.Spec.ServiceAllocation = &lbv1alpha1.ServiceAllocation{Namespaces: []string{"other"}}
				return p
			}()}, reason: lbv1alpha1.PoolNotAllowedReason},
		{name: "pool at the assignment bound", req: func(r *lbipam.Request) { r.MaxAssignmentsPerPool = 1 },
			pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.0", "other", "x", ""))}, reason: lbv1alpha1.AssignmentLimitExceededReason},
		{name: "sharing counts toward the assignment bound", req: func(r *lbipam.Request) { r.SharingKey = "k"; r.MaxAssignmentsPerPool = 2 },
			pools:  []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.2", "ns", "x", "k", "TCP/443"), held("10.0.0.2", "ns", "y", "k", "TCP/8443"))},
			reason: lbv1alpha1.AssignmentLimitExceededReason},
		{name: "requested address in a pool at the bound", req: func(r *lbipam.Request) {
			r.Address = netip.MustParseAddr("10.0.0.3")
			r.MaxAssignmentsPerPool = 1
		}, pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.0", "other", "x", ""))}, reason: lbv1alpha1.AssignmentLimitExceededReason},
		{name: "own assignment not counted toward the bound", req: func(r *lbipam.Request) { r.MaxAssignmentsPerPool = 1 },
			pools: []lbipam.Pool{pool(t, "p", []string{"10.0.0.0/30"}, held("10.0.0.0", "ns", "new", ""))}, addr: "10.0.0.1"},
		{name: "next pool below the bound", req: func(r *lbipam.Request) { r.MaxAssignmentsPerPool = 1 },
			pools: []lbipam.Pool{pool(t, "a", []string{"10.0.0.0/30"}, held("10.0.0.0", "other", "x", "")), pool(t, "b", []string{"10.0.1.0/30"})}, addr: "10.0.1.0"},
		{name: "priority", pools: func() []lbipam.Pool {
			a, b := pool(t, "a", []string{"10.0.0.0/32"}), pool(t, "b", []string{"10.0.1.0/32"})
			a.Obj.Spec.ServiceAllocation = &lbv1alpha1.ServiceAllocation{Priority: 5}
			ps := []lbipam.Pool{a, b}
			lbipam.SortPools(ps)
			return ps
		}(), addr: "10.0.1.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req
			if tc.req != nil {
				tc.req(&r)
			}
			d := lbipam.Allocate(r, tc.pools)
			if tc.reason != "" {
				if d.OK() || d.Reason != tc.reason {
					t.Fatalf("got %+v, want reason %s", d, tc.reason)
				}
				return
			}
			if !d.OK() || d.Address.String() != tc.addr {
				t.Fatalf("got %+v, want %s", d, tc.addr)
			}
		})
	}
}
