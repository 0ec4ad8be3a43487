// Command xrd2crd prints the CustomResourceDefinitions Crossplane generates
// from CompositeResourceDefinitions: the composite's and, where the XRD offers
// claims, the claim's. It calls the same conversion Crossplane's CLI uses, so
// the tests check the CRDs the API server is really asked to accept.
//
// Usage: xrd2crd FILE... (YAML). Writes the CRDs as a YAML stream to stdout.
package main

import (
	"fmt"
	"os"

	un "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/crossplane/crossplane/v2/cmd/crank/common/crd"
)

func main() {
	var xrds []*un.Unstructured
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		u := &un.Unstructured{}
		if err := yaml.Unmarshal(raw, &u.Object); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(2)
		}
		// The API server gives every XRD a uid, and the generated CRDs'
		// owner reference carries it: a file has none, so lend it one.
		if u.GetUID() == "" {
			u.SetUID("00000000-0000-0000-0000-00000000f10e")
		}
		xrds = append(xrds, u)
	}
	crds, err := crd.ConvertToCRDs(xrds)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, c := range crds {
		c.APIVersion, c.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
		out, err := yaml.Marshal(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Printf("---\n%s", out)
	}
}
