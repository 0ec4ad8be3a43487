"""Pure builders: values in, Kubernetes manifests out (SuperLink, pools, pods, TLS, identities, policies)."""
