package stamp

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// maxKeyFile bounds what ReadKeyFile reads.
const maxKeyFile = 4096

// ReadKeyFile reads an HMAC key as stamp-suite's --hmac-key-file does, so
// one file serves both tools: the file's text, trimmed, as hex when it
// decodes as such, else its raw bytes. The key must have at least
// MinKeyLen bytes.
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth key file: %w", err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("auth key file %s: %d bytes, more than %d", path, len(b), maxKeyFile)
	}
	key := b
	if h, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil {
		key = h
	}
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("auth key file %s: key of %d bytes, want at least %d", path, len(key), MinKeyLen)
	}
	return key, nil
}
