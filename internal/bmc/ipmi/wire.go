package ipmi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// RMCP (DMTF ASF) header, IPMI v2.0 §13.1.
const (
	rmcpVersion   = 0x06
	rmcpNoAck     = 0xff
	rmcpClassIPMI = 0x07
	rmcpClassASF  = 0x06
)

// Session header authentication types (IPMI v2.0 §13.6): NONE..OEM are
// IPMI v1.5 framing; RMCP+ is the v2.0 framing.
const (
	authTypeNone  = 0x00
	authTypeRMCPP = 0x06
)

// RMCP+ payload types (IPMI v2.0 §13.27.3).
const (
	payloadIPMI        = 0x00
	payloadOpenSessReq = 0x10
	payloadOpenSessRsp = 0x11
	payloadRAKP1       = 0x12
	payloadRAKP2       = 0x13
	payloadRAKP3       = 0x14
	payloadRAKP4       = 0x15
)

// Network functions and commands served.
const (
	netFnChassis = 0x00
	netFnApp     = 0x06

	cmdGetDeviceID              = 0x01
	cmdGetChannelAuthCaps       = 0x38
	cmdSetSessionPrivilegeLevel = 0x3b
	cmdCloseSession             = 0x3c
	cmdGetChannelCipherSuites   = 0x54

	cmdGetChassisStatus     = 0x01
	cmdChassisControl       = 0x02
	cmdSetSystemBootOptions = 0x08
	cmdGetSystemBootOptions = 0x09
)

// Completion codes (IPMI v2.0 §5.2).
const (
	ccOK               = 0x00
	ccInvalidCommand   = 0xc1
	ccReqDataLength    = 0xc7
	ccParamOutOfRange  = 0xc9
	ccInvalidDataField = 0xcc
	ccParamUnsupported = 0x80 // Set/Get System Boot Options: parameter not supported
	ccInsufficientPriv = 0xd4
	ccUnspecified      = 0xff
)

// RMCP+ status codes in Open Session and RAKP responses (IPMI v2.0 §13.24).
const (
	statusOK                 = 0x00
	statusNoResources        = 0x01
	statusInvalidSessionID   = 0x02
	statusInvalidRole        = 0x09
	statusUnauthorizedRole   = 0x0a
	statusInvalidNameLength  = 0x0c
	statusUnauthorizedName   = 0x0d
	statusInvalidIntegrity   = 0x0f
	statusNoCipherSuiteMatch = 0x11
	statusIllegalParameter   = 0x12
)

// Privilege levels.
const (
	privCallback      = 0x01
	privUser          = 0x02
	privOperator      = 0x03
	privAdministrator = 0x04
)

var errShort = errors.New("ipmi: packet too short")

// packet is one decoded RMCP/IPMI datagram.
type packet struct {
	// rmcpp: v2.0 (RMCP+) framing; else v1.5 with authTypeNone.
	rmcpp bool
	// payloadType (RMCP+ only) without the encrypted/authenticated bits.
	payloadType byte
	encrypted   bool
	authed      bool
	sessionID   uint32
	seq         uint32
	payload     []byte
	// signed is the bytes the integrity code covers (RMCP+, authenticated);
	// authCode the code received.
	signed   []byte
	authCode []byte
}

// decodePacket parses an RMCP datagram carrying an IPMI session, v1.5
// (authentication type NONE only) or v2.0 RMCP+. authCodeLen is the length
// of the integrity code to expect on authenticated RMCP+ packets; it is
// looked up by session ID through the callback, since only the session
// knows its integrity algorithm. It never panics on any input.
func decodePacket(b []byte, authCodeLen func(sessionID uint32) int) (*packet, error) {
	if len(b) < 4 {
		return nil, errShort
	}
	if b[0] != rmcpVersion || b[3]&0x1f != rmcpClassIPMI || b[3]&0x80 != 0 {
		return nil, fmt.Errorf("ipmi: not an IPMI RMCP packet (class %#x)", b[3])
	}
	s := b[4:]
	if len(s) < 1 {
		return nil, errShort
	}
	p := &packet{}
	switch s[0] & 0x0f {
	case authTypeNone:
		// authType(1) seq(4) sessionID(4) len(1) msg
		if len(s) < 10 {
			return nil, errShort
		}
		p.seq = binary.LittleEndian.Uint32(s[1:5])
		p.sessionID = binary.LittleEndian.Uint32(s[5:9])
		n := int(s[9])
		if len(s) < 10+n {
			return nil, errShort
		}
		p.payload = s[10 : 10+n]
		return p, nil
	case authTypeRMCPP:
		p.rmcpp = true
		if len(s) < 12 {
			return nil, errShort
		}
		pt := s[1]
		p.encrypted = pt&0x80 != 0
		p.authed = pt&0x40 != 0
		p.payloadType = pt & 0x3f
		if p.payloadType == 0x02 { // OEM explicit: not supported
			return nil, fmt.Errorf("ipmi: OEM payloads are not supported")
		}
		p.sessionID = binary.LittleEndian.Uint32(s[2:6])
		p.seq = binary.LittleEndian.Uint32(s[6:10])
		n := int(binary.LittleEndian.Uint16(s[10:12]))
		if len(s) < 12+n {
			return nil, errShort
		}
		p.payload = s[12 : 12+n]
		if !p.authed {
			return p, nil
		}
		codeLen := authCodeLen(p.sessionID)
		if codeLen <= 0 {
			return nil, fmt.Errorf("ipmi: authenticated packet for unknown session %#x", p.sessionID)
		}
		// trailer: pad(0..3 x 0xff) padLen(1) nextHeader(1) authCode
		rest := s[12+n:]
		if len(rest) < 2+codeLen {
			return nil, errShort
		}
		padLen := int(rest[len(rest)-codeLen-2])
		if padLen > 3 || len(rest) != padLen+2+codeLen {
			return nil, fmt.Errorf("ipmi: bad integrity pad")
		}
		if rest[len(rest)-codeLen-1] != rmcpClassIPMI {
			return nil, fmt.Errorf("ipmi: bad next header")
		}
		p.signed = s[:len(s)-codeLen]
		p.authCode = s[len(s)-codeLen:]
		return p, nil
	default:
		return nil, fmt.Errorf("ipmi: authentication type %#x refused (only NONE before a session and RMCP+)", s[0]&0x0f)
	}
}

// encodeV15 frames msg as an IPMI v1.5 session-less packet (authType NONE).
func encodeV15(msg []byte) []byte {
	out := make([]byte, 0, 14+len(msg)+1)
	out = append(out, rmcpVersion, 0, rmcpNoAck, rmcpClassIPMI)
	out = append(out, authTypeNone, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(msg))) //nolint:gosec // IPMI messages are short
	out = append(out, msg...)
	return out
}

// encodeRMCPP frames payload as an RMCP+ packet; sign, when set, appends
// the integrity trailer and code over the session header onwards.
func encodeRMCPP(ptype byte, encrypted bool, sessionID, seq uint32, payload []byte, sign func([]byte) []byte) []byte {
	pt := ptype
	if encrypted {
		pt |= 0x80
	}
	if sign != nil {
		pt |= 0x40
	}
	out := make([]byte, 0, 4+12+len(payload)+24)
	out = append(out, rmcpVersion, 0, rmcpNoAck, rmcpClassIPMI)
	out = append(out, authTypeRMCPP, pt)
	out = binary.LittleEndian.AppendUint32(out, sessionID)
	out = binary.LittleEndian.AppendUint32(out, seq)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(payload))) //nolint:gosec // payloads are IPMI messages, far below 64 KiB
	out = append(out, payload...)
	if sign == nil {
		return out
	}
	// Pad so that authType..nextHeader is a multiple of 4.
	body := len(out) - 4
	pad := (4 - (body+2)%4) % 4
	for range pad {
		out = append(out, 0xff)
	}
	out = append(out, byte(pad), rmcpClassIPMI)
	return append(out, sign(out[4:])...)
}

// message is an IPMI LAN message (IPMI v2.0 §13.8).
type message struct {
	rsAddr, netFn, rsLUN, rqAddr, rqSeq, rqLUN, cmd byte
	data                                            []byte
}

func checksum(b []byte) byte {
	var c byte
	for _, x := range b {
		c += x
	}
	return -c
}

// decodeMessage parses an IPMI request message and checks both checksums.
func decodeMessage(b []byte) (*message, error) {
	if len(b) < 7 {
		return nil, errShort
	}
	if checksum(b[:2]) != b[2] || checksum(b[3:len(b)-1]) != b[len(b)-1] {
		return nil, fmt.Errorf("ipmi: bad message checksum")
	}
	return &message{
		rsAddr: b[0], netFn: b[1] >> 2, rsLUN: b[1] & 3,
		rqAddr: b[3], rqSeq: b[4] >> 2, rqLUN: b[4] & 3,
		cmd: b[5], data: b[6 : len(b)-1],
	}, nil
}

// encodeResponse builds the response message to req with completion code
// cc and data.
func encodeResponse(req *message, cc byte, data []byte) []byte {
	out := make([]byte, 0, 8+len(data))
	out = append(out, req.rqAddr, (req.netFn|1)<<2|req.rqLUN)
	out = append(out, checksum(out[:2]))
	out = append(out, req.rsAddr, req.rqSeq<<2|req.rsLUN, req.cmd, cc)
	out = append(out, data...)
	return append(out, checksum(out[3:]))
}

// encodeRequest builds a request message (the client side).
func encodeRequest(netFn, cmd, seq byte, data []byte) []byte {
	out := make([]byte, 0, 7+len(data))
	out = append(out, 0x20, netFn<<2)
	out = append(out, checksum(out[:2]))
	out = append(out, 0x81, seq<<2, cmd)
	out = append(out, data...)
	return append(out, checksum(out[3:]))
}
