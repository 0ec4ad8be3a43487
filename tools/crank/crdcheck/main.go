// Command crdcheck validates CustomResourceDefinitions the way the API server
// does when they are created, including the static cost estimate of their CEL
// rules, which admission-time validation alone does not check.
//
// Usage: crdcheck FILE... (YAML, apiextensions.k8s.io/v1). Prints one line per
// problem and exits 1 if there is any.
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

func check(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := apiextensions.AddToScheme(scheme); err != nil {
		return nil, err
	}
	scheme.Default(&crd)
	var internal apiextensions.CustomResourceDefinition
	if err := scheme.Convert(&crd, &internal, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var problems []string
	for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), &internal) {
		problems = append(problems, fmt.Sprintf("%s: %s", path, e.Error()))
	}
	return problems, nil
}

func main() {
	failed := false
	for _, path := range os.Args[1:] {
		problems, err := check(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for _, p := range problems {
			fmt.Println(p)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
	fmt.Println("ok")
}
