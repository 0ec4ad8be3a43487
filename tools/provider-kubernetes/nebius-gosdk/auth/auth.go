// Package auth stands in for the Nebius SDK's auth package (see ../go.mod).
package auth

// BearerToken is an IAM token, as provider-kubernetes reads it.
type BearerToken struct {
	Token string
}

// PrivateKeyParser holds nothing: the stand-in never reads a key.
type PrivateKeyParser struct{}

// NewPrivateKeyParser ignores the key: gosdk.New fails before it would be read.
func NewPrivateKeyParser([]byte, string, string) *PrivateKeyParser { return &PrivateKeyParser{} }
