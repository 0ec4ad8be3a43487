// Command crdcheck validates CustomResourceDefinitions the way the API server
// does when they are created, including the static cost estimate of their CEL
// rules, which admission-time validation alone does not check.
//
// It is built once per supported Kubernetes minor, each time against that
// minor's k8s.io/apiextensions-apiserver (go.mod is the newest; go.1.NN.mod the
// others), because the cost estimate changes from one minor to the next.
//
// Usage: crdcheck FILE... (YAML streams of apiextensions.k8s.io/v1 CRDs).
// Prints one line per problem and exits 1 if there is any, else prints "ok"
// and the apiextensions-apiserver version it judged with.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := apiextensions.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// check validates every CRD in one YAML stream and returns its problems.
func check(scheme *runtime.Scheme, path string) ([]string, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var problems []string
	count := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, count, fmt.Errorf("%s: %w", path, err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
			return nil, count, fmt.Errorf("%s: %w", path, err)
		}
		if crd.Name == "" {
			continue // an empty document between separators
		}
		count++
		scheme.Default(&crd)
		var internal apiextensions.CustomResourceDefinition
		if err := scheme.Convert(&crd, &internal, nil); err != nil {
			return nil, count, fmt.Errorf("%s: %w", path, err)
		}
		for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), &internal) {
			problems = append(problems, fmt.Sprintf("%s: %s: %s", path, crd.Name, e.Error()))
		}
	}
	return problems, count, nil
}

func apiextensionsVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/apiextensions-apiserver" {
				// A control plane's module replaces its staging modules by their releases.
				if dep.Replace != nil {
					return dep.Replace.Version
				}
				return dep.Version
			}
		}
	}
	return "unknown"
}

func main() {
	scheme, err := newScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	failed, total := false, 0
	for _, path := range os.Args[1:] {
		problems, count, err := check(scheme, path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		total += count
		for _, p := range problems {
			fmt.Println(p)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
	if total == 0 {
		fmt.Fprintln(os.Stderr, "no CustomResourceDefinition found")
		os.Exit(2)
	}
	fmt.Printf("ok: %d CRDs, k8s.io/apiextensions-apiserver %s\n", total, apiextensionsVersion())
}
