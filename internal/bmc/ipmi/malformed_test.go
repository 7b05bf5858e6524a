package ipmi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"testing"
)

// Malformed and unauthenticated packets: the server never panics, never
// runs a command, and answers only what the specification allows before a
// session (checkPreSessionAnswer).
func TestMalformedPackets(t *testing.T) {
	ctx := context.Background()
	fb := &fakeBackend{user: "admin", pass: "pw", on: true}
	s := &Server{Backend: fb}
	var in [][]byte
	in = append(in, seeds()...)
	// Every command in v1.5 framing with authentication type NONE, and in
	// RMCP+ framing without a session.
	for _, nf := range []byte{netFnChassis, netFnApp} {
		for cmd := range 256 {
			req := encodeRequest(nf, byte(cmd), 1, []byte{1})
			in = append(in, encodeV15(req), encodeRMCPP(payloadIPMI, false, 0, 0, req, nil))
		}
	}
	// IPMI v1.5 sessions (MD5, password) and cipher suite 0 are refused.
	for _, at := range []byte{1, 2, 4, 5} {
		p := encodeV15(encodeRequest(netFnChassis, cmdChassisControl, 1, []byte{0}))
		p[4] = at
		in = append(in, p)
	}
	// Truncations of every seed, random bytes.
	for _, s := range seeds() {
		for i := range s {
			in = append(in, s[:i])
		}
	}
	for range 2000 {
		b := make([]byte, 1+int(randByte())%96)
		_, _ = rand.Read(b)
		if len(b) > 4 {
			copy(b, []byte{rmcpVersion, 0, rmcpNoAck, rmcpClassIPMI, authTypeRMCPP})
		}
		in = append(in, b)
	}
	for _, b := range in {
		out := s.Handle(ctx, b, fuzzAddr)
		if out != nil {
			checkPreSessionAnswer(t, out)
		}
	}
	if len(fb.calls) != 0 {
		t.Fatalf("commands ran without a session: %v", fb.calls)
	}

	// Cipher suite 0 (no authentication) and 1 (no integrity) refused.
	for _, algs := range [][3]byte{{0, 0, 0}, {1, 0, 0}, {1, 1, 0}} {
		open := []byte{1, 4, 0, 0, 9, 9, 9, 9, 0, 0, 0, 8, algs[0], 0, 0, 0, 1, 0, 0, 8, algs[1], 0, 0, 0, 2, 0, 0, 8, algs[2], 0, 0, 0}
		out := s.Handle(ctx, encodeRMCPP(payloadOpenSessReq, false, 0, 0, open, nil), fuzzAddr)
		p, err := decodePacket(out, func(uint32) int { return 0 })
		if err != nil || p.payload[1] != statusNoCipherSuiteMatch {
			t.Fatalf("suite %v: answer %x, %v; want status %#x", algs, out, err, statusNoCipherSuiteMatch)
		}
	}
	// Anonymous (null user name) refused at RAKP 2.
	open := []byte{1, 4, 0, 0, 9, 9, 9, 9, 0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 8, 1, 0, 0, 0, 2, 0, 0, 8, 1, 0, 0, 0}
	p, _ := decodePacket(s.Handle(ctx, encodeRMCPP(payloadOpenSessReq, false, 0, 0, open, nil), fuzzAddr), func(uint32) int { return 0 })
	id := binary.LittleEndian.Uint32(p.payload[8:12])
	r1 := binary.LittleEndian.AppendUint32([]byte{2, 0, 0, 0}, id)
	r1 = append(r1, make([]byte, 16)...)
	r1 = append(r1, 0x14, 0, 0, 0)
	p, _ = decodePacket(s.Handle(ctx, encodeRMCPP(payloadRAKP1, false, 0, 0, r1, nil), fuzzAddr), func(uint32) int { return 0 })
	if p == nil || p.payload[1] != statusUnauthorizedName {
		t.Fatalf("anonymous RAKP 1 answered %+v, want status %#x", p, statusUnauthorizedName)
	}
}

// The number of sessions is bounded: the next Open Session gets
// "insufficient resources".
func TestSessionBound(t *testing.T) {
	ctx := context.Background()
	s := &Server{Backend: &fakeBackend{user: "admin", pass: "pw"}, MaxSessions: 4}
	open := []byte{1, 4, 0, 0, 9, 9, 9, 9, 0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 8, 1, 0, 0, 0, 2, 0, 0, 8, 1, 0, 0, 0}
	for i := range 5 {
		p, err := decodePacket(s.Handle(ctx, encodeRMCPP(payloadOpenSessReq, false, 0, 0, open, nil), fuzzAddr), func(uint32) int { return 0 })
		if err != nil {
			t.Fatal(err)
		}
		want := byte(statusOK)
		if i == 4 {
			want = statusNoResources
		}
		if p.payload[1] != want {
			t.Fatalf("open %d: status %#x, want %#x", i, p.payload[1], want)
		}
	}
}

func randByte() byte {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return b[0]
}
