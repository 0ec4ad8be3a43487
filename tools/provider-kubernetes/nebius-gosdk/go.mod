// A stand-in for github.com/nebius/gosdk, which provider-kubernetes v1.3
// imports for one ProviderConfig credential source: a Nebius service account's
// key, for Nebius managed clusters. The Go module proxy refused every version
// of that module when v1.3 was pinned, so go.v1.3.mod replaces it with this
// one, which offers just what provider-kubernetes calls and refuses rather
// than pretends: building the SDK fails, naming why. The e2e never uses that
// credential source; every other one is provider-kubernetes' own code.
module github.com/nebius/gosdk

go 1.24
