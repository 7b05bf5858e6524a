package ipmi

import (
	"context"
	"net"
	"testing"
)

var fuzzAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 623}

// seeds are real packets: Get Channel Auth Caps (v1.5), Open Session, RAKP 1.
func seeds() [][]byte {
	gcac := encodeV15(encodeRequest(netFnApp, cmdGetChannelAuthCaps, 1, []byte{0x8e, 0x04}))
	open := []byte{1, 4, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 8, 1, 0, 0, 0, 2, 0, 0, 8, 1, 0, 0, 0}
	r1 := append([]byte{2, 0, 0, 0, 1, 2, 3, 4}, make([]byte, 16)...)
	r1 = append(r1, 0x14, 0, 0, 5, 'a', 'd', 'm', 'i', 'n')
	return [][]byte{
		gcac,
		encodeRMCPP(payloadOpenSessReq, false, 0, 0, open, nil),
		encodeRMCPP(payloadRAKP1, false, 0, 0, r1, nil),
		encodeRMCPP(payloadIPMI, true, 0x01020304, 1, make([]byte, 32), func([]byte) []byte { return make([]byte, 12) }),
	}
}

// FuzzDecodePacket: the RMCP/RMCP+ and IPMI message decoders never panic.
func FuzzDecodePacket(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(_ *testing.T, b []byte) {
		p, err := decodePacket(b, func(uint32) int { return 12 })
		if err == nil {
			_, _ = decodeMessage(p.payload)
		}
		_, _ = decodeMessage(b)
	})
}

// FuzzServer: whatever a sequence of packets holds, the server does not
// panic, and before a session answers only Get Channel Authentication
// Capabilities, Get Channel Cipher Suites, Open Session and RAKP.
func FuzzServer(f *testing.F) {
	ss := seeds()
	f.Add(ss[0], ss[1], ss[2])
	f.Add(ss[1], ss[2], ss[3])
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		s := &Server{Backend: &fakeBackend{user: "admin", pass: "pw", on: true}}
		for _, in := range [][]byte{a, b, c} {
			out := s.Handle(context.Background(), in, fuzzAddr)
			if out == nil {
				continue
			}
			checkPreSessionAnswer(t, out)
		}
		if fb := s.Backend.(*fakeBackend); len(fb.calls) != 0 {
			t.Fatalf("a command ran without a session: %v", fb.calls)
		}
	})
}

// checkPreSessionAnswer fails t unless out is an answer the specification
// allows outside a session.
func checkPreSessionAnswer(t *testing.T, out []byte) {
	t.Helper()
	p, err := decodePacket(out, func(uint32) int { return 0 })
	if err != nil {
		t.Fatalf("the server sent an undecodable packet %x: %v", out, err)
	}
	if p.authed || p.encrypted || p.sessionID != 0 {
		t.Fatalf("a session packet before any session: %x", out)
	}
	switch {
	case p.rmcpp && p.payloadType != payloadIPMI:
		switch p.payloadType {
		case payloadOpenSessRsp, payloadRAKP2, payloadRAKP4:
		default:
			t.Fatalf("payload type %#x answered before a session", p.payloadType)
		}
	default:
		if len(p.payload) < 7 {
			t.Fatalf("short answer %x", out)
		}
		if cmd := p.payload[5]; p.payload[1]>>2 != netFnApp|1 || (cmd != cmdGetChannelAuthCaps && cmd != cmdGetChannelCipherSuites) {
			t.Fatalf("command %#x answered before a session", cmd)
		}
	}
}
