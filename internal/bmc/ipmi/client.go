package ipmi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// Client is a minimal RMCP+ client: the controller's readiness probe, the
// tests and the benchmark use it. It speaks cipher suites 3 and 17.
type Client struct {
	conn      net.Conn
	keys      *keys
	bmcID     uint32
	consoleID uint32
	seq       uint32
	rqSeq     byte
	// Timeout is each round trip's timeout (1 s by default); a request is
	// sent up to three times.
	Timeout time.Duration
}

// CipherSuite3 and CipherSuite17 select a suite in [Dial].
const (
	CipherSuite3  = 3
	CipherSuite17 = 17
)

// StatusError is an RMCP+ status code refusing a session.
type StatusError struct {
	Step   string
	Status byte
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("ipmi: %s refused with RMCP+ status %#02x", e.Step, e.Status)
}

// Dial opens an authenticated, encrypted session at administrator level.
func Dial(ctx context.Context, addr, user, password string, cipherSuite byte) (*Client, error) {
	var su suite
	found := false
	for _, s := range suites {
		if s.id == cipherSuite {
			su, found = s, true
		}
	}
	if !found {
		return nil, fmt.Errorf("ipmi: cipher suite %d not supported", cipherSuite)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, Timeout: time.Second}
	if err := c.handshake(ctx, su, user, password); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) roundTrip(ctx context.Context, out []byte, accept func(*packet) bool) (*packet, error) {
	buf := make([]byte, 1024)
	for range 3 {
		if _, err := c.conn.Write(out); err != nil {
			return nil, err
		}
		deadline := time.Now().Add(c.Timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		_ = c.conn.SetReadDeadline(deadline)
		for {
			n, err := c.conn.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
					break
				}
				return nil, err
			}
			p, err := decodePacket(append([]byte(nil), buf[:n]...), func(uint32) int {
				if c.keys == nil {
					return 0
				}
				return c.keys.suite.authCodeLen()
			})
			if err == nil && accept(p) {
				return p, nil
			}
		}
	}
	return nil, fmt.Errorf("ipmi: no answer from %s", c.conn.RemoteAddr())
}

func (c *Client) handshake(ctx context.Context, su suite, user, password string) error {
	var b [4]byte
	_, _ = rand.Read(b[:])
	c.consoleID = binary.LittleEndian.Uint32(b[:]) | 1
	req := []byte{1, privAdministrator, 0, 0}
	req = binary.LittleEndian.AppendUint32(req, c.consoleID)
	req = append(req, 0x00, 0, 0, 8, su.auth, 0, 0, 0, 0x01, 0, 0, 8, su.integrity, 0, 0, 0, 0x02, 0, 0, 8, su.conf, 0, 0, 0)
	p, err := c.roundTrip(ctx, encodeRMCPP(payloadOpenSessReq, false, 0, 0, req, nil), func(p *packet) bool {
		return p.rmcpp && p.payloadType == payloadOpenSessRsp && len(p.payload) >= 2 && p.payload[0] == 1
	})
	if err != nil {
		return err
	}
	if p.payload[1] != statusOK {
		return &StatusError{Step: "Open Session", Status: p.payload[1]}
	}
	if len(p.payload) < 36 {
		return errShort
	}
	c.bmcID = binary.LittleEndian.Uint32(p.payload[8:12])

	var rm [16]byte
	_, _ = rand.Read(rm[:])
	role := byte(privAdministrator | 0x10)
	r1 := []byte{2, 0, 0, 0}
	r1 = binary.LittleEndian.AppendUint32(r1, c.bmcID)
	r1 = append(r1, rm[:]...)
	r1 = append(r1, role, 0, 0, byte(len(user))) //nolint:gosec // user names longer than 16 bytes are refused by the BMC
	r1 = append(r1, user...)
	p, err = c.roundTrip(ctx, encodeRMCPP(payloadRAKP1, false, 0, 0, r1, nil), func(p *packet) bool {
		return p.rmcpp && p.payloadType == payloadRAKP2 && len(p.payload) >= 2 && p.payload[0] == 2
	})
	if err != nil {
		return err
	}
	if p.payload[1] != statusOK {
		return &StatusError{Step: "RAKP 2", Status: p.payload[1]}
	}
	if len(p.payload) < 40 {
		return errShort
	}
	rc, guid := p.payload[8:24], p.payload[24:40]
	var sid, cid [4]byte
	binary.LittleEndian.PutUint32(sid[:], c.bmcID)
	binary.LittleEndian.PutUint32(cid[:], c.consoleID)
	ul := []byte{role, byte(len(user))} //nolint:gosec // as above
	if !hmac.Equal(p.payload[40:], su.mac([]byte(password), cid[:], sid[:], rm[:], rc, guid, ul, []byte(user))) {
		return &StatusError{Step: "RAKP 2 (the BMC does not know this password)", Status: statusInvalidIntegrity}
	}
	r3 := []byte{3, statusOK, 0, 0}
	r3 = append(r3, sid[:]...)
	r3 = append(r3, su.mac([]byte(password), rc, cid[:], ul, []byte(user))...)
	p, err = c.roundTrip(ctx, encodeRMCPP(payloadRAKP3, false, 0, 0, r3, nil), func(p *packet) bool {
		return p.rmcpp && p.payloadType == payloadRAKP4 && len(p.payload) >= 2 && p.payload[0] == 3
	})
	if err != nil {
		return err
	}
	if p.payload[1] != statusOK {
		return &StatusError{Step: "RAKP 4", Status: p.payload[1]}
	}
	sik := su.mac([]byte(password), rm[:], rc, ul, []byte(user))
	if len(p.payload) < 8+su.rakp4Len() || !hmac.Equal(p.payload[8:8+su.rakp4Len()], su.mac(sik, rm[:], sid[:], guid)[:su.rakp4Len()]) {
		return errors.New("ipmi: RAKP 4 integrity check value does not match")
	}
	c.keys, err = deriveKeys(su, sik)
	return err
}

// Request sends one IPMI request in the session and returns the
// completion code and response data.
func (c *Client) Request(ctx context.Context, netFn, cmd byte, data []byte) (byte, []byte, error) {
	c.seq++
	c.rqSeq = (c.rqSeq + 1) & 0x3f
	seq := c.rqSeq
	out := encodeRMCPP(payloadIPMI, true, c.bmcID, c.seq, c.keys.encrypt(encodeRequest(netFn, cmd, seq, data)), c.keys.sign)
	var m []byte
	_, err := c.roundTrip(ctx, out, func(p *packet) bool {
		if !p.rmcpp || p.payloadType != payloadIPMI || p.sessionID != c.consoleID || !p.authed || !p.encrypted || !c.keys.verify(p.signed, p.authCode) {
			return false
		}
		plain, err := c.keys.decrypt(p.payload)
		if err != nil || len(plain) < 8 || plain[5] != cmd || plain[4]>>2 != seq {
			return false
		}
		m = plain
		return true
	})
	if err != nil {
		return 0, nil, err
	}
	return m[6], m[7 : len(m)-1], nil
}

// DeviceID is Get Device ID's answer, raw.
func (c *Client) DeviceID(ctx context.Context) ([]byte, error) {
	cc, d, err := c.Request(ctx, netFnApp, cmdGetDeviceID, nil)
	if err != nil {
		return nil, err
	}
	if cc != ccOK {
		return nil, fmt.Errorf("ipmi: Get Device ID: completion code %#02x", cc)
	}
	return d, nil
}

// Close closes the session and the socket.
func (c *Client) Close(ctx context.Context) error {
	var id [4]byte
	binary.LittleEndian.PutUint32(id[:], c.bmcID)
	_, _, err := c.Request(ctx, netFnApp, cmdCloseSession, id[:])
	return errors.Join(err, c.conn.Close())
}

// PowerStatus is Get Chassis Status's power bit.
func (c *Client) PowerStatus(ctx context.Context) (bool, error) {
	cc, d, err := c.Request(ctx, netFnChassis, cmdGetChassisStatus, nil)
	if err != nil {
		return false, err
	}
	if cc != ccOK || len(d) < 1 {
		return false, fmt.Errorf("ipmi: Get Chassis Status: completion code %#02x", cc)
	}
	return d[0]&1 != 0, nil
}

// ChassisControl sends a Chassis Control action.
func (c *Client) ChassisControl(ctx context.Context, a ChassisAction) error {
	cc, _, err := c.Request(ctx, netFnChassis, cmdChassisControl, []byte{byte(a)})
	if err != nil {
		return err
	}
	if cc != ccOK {
		return fmt.Errorf("ipmi: Chassis Control: completion code %#02x", cc)
	}
	return nil
}
