package ipmi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RAKP-HMAC-SHA1 is what cipher suite 3 is made of (IPMI v2.0 §13.28)
	"crypto/sha256"
	"errors"
	"hash"
)

// Algorithms of the authentication, integrity and confidentiality payloads
// (IPMI v2.0 §13.28).
const (
	authRAKPHMACSHA1   = 0x01
	authRAKPHMACSHA256 = 0x03

	integrityHMACSHA1_96   = 0x01
	integrityHMACSHA256128 = 0x04

	confAESCBC128 = 0x01
)

// suite is a cipher suite this BMC offers; the others (0: no
// authentication, 1 and 2: no confidentiality, MD5 ones) are refused.
type suite struct {
	id                    byte
	auth, integrity, conf byte
}

// Suites are the cipher suites served: 3 and 17.
var suites = []suite{
	{id: 3, auth: authRAKPHMACSHA1, integrity: integrityHMACSHA1_96, conf: confAESCBC128},
	{id: 17, auth: authRAKPHMACSHA256, integrity: integrityHMACSHA256128, conf: confAESCBC128},
}

func findSuite(auth, integrity, conf byte) (suite, bool) {
	for _, s := range suites {
		if s.auth == auth && s.integrity == integrity && s.conf == conf {
			return s, true
		}
	}
	return suite{}, false
}

func (s suite) hash() func() hash.Hash {
	if s.auth == authRAKPHMACSHA256 {
		return sha256.New
	}
	return sha1.New
}

// rakp4Len is the length of the RAKP 4 integrity check value: 12 for
// HMAC-SHA1, 16 for HMAC-SHA256 (IPMI v2.0 §13.31 and its SHA-256 errata).
func (s suite) rakp4Len() int {
	if s.auth == authRAKPHMACSHA256 {
		return 16
	}
	return 12
}

// authCodeLen is the length of the per-packet integrity code.
func (s suite) authCodeLen() int {
	if s.integrity == integrityHMACSHA256128 {
		return 16
	}
	return 12
}

func (s suite) mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(s.hash(), key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// keys are a session's keys (IPMI v2.0 §13.32).
type keys struct {
	suite suite
	sik   []byte
	k1    []byte
	k2    []byte
	block cipher.Block
}

func deriveKeys(s suite, sik []byte) (*keys, error) {
	const1 := make([]byte, 20)
	const2 := make([]byte, 20)
	for i := range const1 {
		const1[i], const2[i] = 1, 2
	}
	k := &keys{suite: s, sik: sik, k1: s.mac(sik, const1), k2: s.mac(sik, const2)}
	b, err := aes.NewCipher(k.k2[:16])
	if err != nil {
		return nil, err
	}
	k.block = b
	return k, nil
}

// sign is the integrity code of the bytes from the session header's
// authentication type through the next header.
func (k *keys) sign(b []byte) []byte {
	return k.suite.mac(k.k1, b)[:k.suite.authCodeLen()]
}

func (k *keys) verify(signed, code []byte) bool {
	return hmac.Equal(k.sign(signed), code)
}

// encrypt is AES-CBC-128 with a random IV and the confidentiality trailer
// (pad bytes 1, 2, 3... then the pad length), IPMI v2.0 §13.29.
func (k *keys) encrypt(plain []byte) []byte {
	pad := (aes.BlockSize - (len(plain)+1)%aes.BlockSize) % aes.BlockSize
	buf := make([]byte, 0, len(plain)+pad+1)
	buf = append(buf, plain...)
	for i := range pad {
		buf = append(buf, byte(i+1))
	}
	buf = append(buf, byte(pad))
	out := make([]byte, aes.BlockSize+len(buf))
	_, _ = rand.Read(out[:aes.BlockSize])
	iv := out[:aes.BlockSize]                                                 // random: rand.Read above
	cipher.NewCBCEncrypter(k.block, iv).CryptBlocks(out[aes.BlockSize:], buf) //nolint:gosec // the IV is random (rand.Read above)
	return out
}

var errDecrypt = errors.New("ipmi: bad encrypted payload")

func (k *keys) decrypt(b []byte) ([]byte, error) {
	if len(b) < 2*aes.BlockSize || len(b)%aes.BlockSize != 0 {
		return nil, errDecrypt
	}
	out := make([]byte, len(b)-aes.BlockSize)
	cipher.NewCBCDecrypter(k.block, b[:aes.BlockSize]).CryptBlocks(out, b[aes.BlockSize:])
	pad := int(out[len(out)-1])
	if pad >= aes.BlockSize || pad+1 > len(out) {
		return nil, errDecrypt
	}
	return out[:len(out)-1-pad], nil
}
