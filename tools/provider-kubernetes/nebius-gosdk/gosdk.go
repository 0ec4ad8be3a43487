// Package gosdk stands in for the Nebius SDK (see go.mod): New always fails.
package gosdk

import (
	"context"
	"errors"

	"github.com/nebius/gosdk/auth"
)

// ErrNotBuilt is what New returns: this build has no Nebius authentication.
var ErrNotBuilt = errors.New("Nebius service account authentication is not part of this build of " +
	"provider-kubernetes: its Nebius SDK is a stand-in that cannot mint tokens")

// SDK is never made: New fails before it would be.
type SDK struct{}

// Option configures New.
type Option func()

// Credentials are what WithCredentials takes.
type Credentials struct{}

// New fails: there is no Nebius SDK in this build.
func New(context.Context, ...Option) (*SDK, error) { return nil, ErrNotBuilt }

// WithCredentials is accepted and ignored: New fails whatever the options.
func WithCredentials(Credentials) Option { return func() {} }

// ServiceAccountReader is accepted and ignored: New fails whatever the options.
func ServiceAccountReader(*auth.PrivateKeyParser) Credentials { return Credentials{} }

// BearerToken fails as New does; no SDK value is ever returned to call it on.
func (*SDK) BearerToken(context.Context) (auth.BearerToken, error) {
	return auth.BearerToken{}, ErrNotBuilt
}
