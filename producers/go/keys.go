package bernstein

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Signer is an Ed25519 key known by its key id ("sha256:" + hex sha256 of the raw public key).
type Signer struct {
	key   ed25519.PrivateKey
	keyID string
}

// NewSigner is the signer of a 32-byte Ed25519 seed.
func NewSigner(seed []byte) (*Signer, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, &ConfigError{Msg: fmt.Sprintf("an Ed25519 seed has 32 bytes, got %d", len(seed))}
	}
	return newSigner(ed25519.NewKeyFromSeed(seed)), nil
}

func newSigner(key ed25519.PrivateKey) *Signer {
	id, _ := PublicKeyID(key.Public().(ed25519.PublicKey))
	return &Signer{key: key, keyID: id}
}

// KeyID is "sha256:<hex>" of the raw public key.
func (s *Signer) KeyID() string { return s.keyID }

// PublicKey is the raw 32-byte public key.
func (s *Signer) PublicKey() []byte { return append([]byte{}, s.key.Public().(ed25519.PublicKey)...) }

// Sign is the Ed25519 signature of data (deterministic: the same bytes always sign the same).
func (s *Signer) Sign(data []byte) []byte { return ed25519.Sign(s.key, data) }

// ProducerKeys is a producer host's identity: its name (producer.id), its signing key and its two
// HMAC keys, which never leave the host: the lineage key (the HMAC envelope of computer-use lineage
// entries) and the redaction key (typed-value digests). Either is nil when the ring has none.
type ProducerKeys struct {
	Name      string
	Signer    *Signer
	Lineage   []byte
	Redaction []byte
	Directory string
}

// ProducerKeysEnv names the producer key directory (made by `bernstein keys init --producer NAME`).
const ProducerKeysEnv = "BERNSTEIN_PRODUCER_KEYS_DIR"

// DefaultProducerKeysDir is $BERNSTEIN_PRODUCER_KEYS_DIR, else $XDG_STATE_HOME/bernstein/producer-keys,
// else ~/.local/state/bernstein/producer-keys (as the Python SDK).
func DefaultProducerKeysDir() string {
	if dir := os.Getenv(ProducerKeysEnv); dir != "" {
		return dir
	}
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" {
		home, _ := os.UserHomeDir()
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "bernstein", "producer-keys")
}

type keyringDoc struct {
	Format   string  `json:"format"`
	Producer *string `json:"producer"`
	Keys     []struct {
		KeyID   string `json:"key_id"`
		Purpose string `json:"purpose"`
		File    string `json:"file"`
		Status  string `json:"status"`
	} `json:"keys"`
}

// LoadProducerKeys reads a producer key directory: keyring.json's "producer" is the name, and the
// newest usable "producer" key of the ring (producer.ed25519.key until a rotation) signs. The key
// file is an unencrypted PEM PKCS#8 Ed25519 private key; its key id must match the ring's.
func LoadProducerKeys(dir string) (*ProducerKeys, error) {
	ringPath := filepath.Join(dir, "keyring.json")
	text, err := os.ReadFile(ringPath)
	if os.IsNotExist(err) {
		return nil, &ConfigError{Msg: fmt.Sprintf("no producer keys in %s; create them with `bernstein keys init --producer NAME --dir %s` (or set %s)", dir, dir, ProducerKeysEnv)}
	}
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("cannot read %s: %v", ringPath, err)}
	}
	var ring keyringDoc
	if err := json.Unmarshal(text, &ring); err != nil || ring.Format != "bernstein.keyring/v1" {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s is not a bernstein.keyring/v1 document", ringPath)}
	}
	if ring.Producer == nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s holds a scheduler's keys, not a producer's: a producer host gets its own (`bernstein keys init --producer NAME`)", dir)}
	}
	keys := &ProducerKeys{Name: *ring.Producer, Directory: dir}
	for _, k := range ring.Keys {
		if (k.Purpose != "producer" && k.Purpose != "lineage" && k.Purpose != "redaction") || k.Status == "revoked" {
			continue
		}
		if strings.Contains(k.File, "/") || strings.HasPrefix(k.File, ".") {
			return nil, &ConfigError{Msg: fmt.Sprintf("%s: key file name %q must be a plain name in the directory", ringPath, k.File)}
		}
		path := filepath.Join(dir, k.File)
		if _, err := os.Stat(path); err != nil {
			continue // a retired key whose private part is gone
		}
		if k.Purpose != "producer" { // the newest usable HMAC key of its purpose
			secret, err := LoadHMACKey(path)
			if err != nil {
				return nil, err
			}
			if k.KeyID != "" && k.KeyID != HMACKeyID(secret) {
				return nil, &ConfigError{Msg: fmt.Sprintf("%s: key_id %s does not match the key in %s (%s)", ringPath, k.KeyID, k.File, HMACKeyID(secret))}
			}
			if k.Purpose == "lineage" {
				keys.Lineage = secret
			} else {
				keys.Redaction = secret
			}
			continue
		}
		signer, err := LoadSigner(path)
		if err != nil {
			return nil, err
		}
		if k.KeyID != "" && k.KeyID != signer.KeyID() {
			return nil, &ConfigError{Msg: fmt.Sprintf("%s: key_id %s does not match the key in %s (%s)", ringPath, k.KeyID, k.File, signer.KeyID())}
		}
		keys.Signer = signer
	}
	if keys.Signer == nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("no usable producer key in %s", ringPath)}
	}
	return keys, nil
}

// LoadHMACKey reads an HMAC key file: the secret as hex characters (64 and a newline as `bernstein
// keys init` writes it), at least 16 bytes.
func LoadHMACKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("cannot read key file %s: %v", path, err)}
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s must hold the key as hex characters", path)}
	}
	if len(secret) < 16 {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s: an HMAC key needs at least 16 bytes", path)}
	}
	return secret, nil
}

// LoadSigner reads an unencrypted PEM PKCS#8 Ed25519 private key.
func LoadSigner(path string) (*Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("cannot read key file %s: %v", path, err)}
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s is not an unencrypted PEM PKCS#8 private key", path)}
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s is not a PKCS#8 private key: %v", path, err)}
	}
	key, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, &ConfigError{Msg: fmt.Sprintf("%s holds a %T, not an Ed25519 private key", path, parsed)}
	}
	return newSigner(key), nil
}
