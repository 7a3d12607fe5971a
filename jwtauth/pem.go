package jwtauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// minRSABits refuses RSA keys that no longer give a safe margin.
const minRSABits = 2048

// parsePublicKeys reads every PEM block of data: PKIX "PUBLIC KEY", PKCS#1 "RSA PUBLIC KEY" or a
// "CERTIFICATE" (its public key is used; the certificate is not validated).
func parsePublicKeys(data []byte) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		var key crypto.PublicKey
		var err error
		switch {
		case block.Type == "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(block.Bytes)
		case block.Type == "RSA PUBLIC KEY":
			key, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case block.Type == "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				key = cert.PublicKey
			}
		case strings.Contains(block.Type, "PRIVATE KEY"):
			return nil, fmt.Errorf("PEM block %q is a private key: configure the public key only", block.Type)
		default:
			return nil, fmt.Errorf("PEM block %q is not a public key (want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE)", block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("PEM block %q: %w", block.Type, err)
		}
		if err := checkKey(key); err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM block found")
	}
	return keys, nil
}

// checkKey accepts the key types JWS uses and refuses weak RSA keys.
func checkKey(key crypto.PublicKey) error {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("RSA key of %d bits is too short (at least %d)", k.N.BitLen(), minRSABits)
		}
	case *ecdsa.PublicKey, ed25519.PublicKey:
	default:
		return fmt.Errorf("unsupported public key type %T", key)
	}
	return nil
}
