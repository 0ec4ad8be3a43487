// Command psscheck judges workloads by the Pod Security Standards the way the
// API server's PodSecurity admission does: the same module
// (k8s.io/pod-security-admission), the same pod spec extraction from a
// workload, the same evaluator, at the policy version a namespace's
// pod-security.kubernetes.io/enforce-version label would name.
//
// One build judges every supported minor: the library keeps each check as it
// was at every policy version, which is how an API server honours an older
// enforce-version.
//
// Usage: psscheck -level restricted -version 1.30 -version 1.35 < manifests.json
// Input: a JSON list of Kubernetes manifests (Pods, DaemonSets, StatefulSets,
// Deployments, Jobs...); ones without a pod spec are skipped.
// Output: a JSON list, one entry per workload and version:
// {"kind", "name", "version", "allowed", "forbidden": [{"reason", "detail"}]}.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/pod-security-admission/admission"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

type forbidden struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

type verdict struct {
	Kind      string      `json:"kind"`
	Name      string      `json:"name"`
	Version   string      `json:"version"`
	Allowed   bool        `json:"allowed"`
	Forbidden []forbidden `json:"forbidden"`
}

type versions []api.Version

func (v *versions) String() string { return fmt.Sprint(*v) }

func (v *versions) Set(text string) error {
	// Written as in the enforce-version label: "v1.30" ("1.30" is taken too).
	parsed, err := api.ParseVersion("v" + strings.TrimPrefix(text, "v"))
	if err != nil {
		return err
	}
	*v = append(*v, parsed)
	return nil
}

func judge(level api.Level, at versions, manifests []json.RawMessage) ([]verdict, error) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, err
	}
	decoder := scheme.Codecs.UniversalDeserializer()
	extractor := admission.DefaultPodSpecExtractor{}
	out := []verdict{}
	for i, manifest := range manifests {
		// Decoded to its Go type as the API server does before admission.
		obj, gvk, err := decoder.Decode(manifest, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			continue // not a built-in kind: no pod spec to judge
		}
		if err != nil {
			return nil, fmt.Errorf("manifest %d: %w", i, err)
		}
		meta, spec, err := extractor.ExtractPodSpec(obj)
		if err != nil {
			continue // the extractor knows no pod spec in this kind (a Service, a Namespace...)
		}
		accessor, err := apimeta.Accessor(obj)
		if err != nil {
			return nil, fmt.Errorf("manifest %d: %w", i, err)
		}
		for _, version := range at {
			lv := api.LevelVersion{Level: level, Version: version}
			results := policy.AggregateCheckResults(evaluator.EvaluatePod(lv, meta, spec))
			v := verdict{Kind: gvk.Kind, Name: accessor.GetName(), Version: version.String(),
				Allowed: results.Allowed, Forbidden: []forbidden{}}
			for j, reason := range results.ForbiddenReasons {
				v.Forbidden = append(v.Forbidden, forbidden{Reason: reason, Detail: results.ForbiddenDetails[j]})
			}
			out = append(out, v)
		}
	}
	return out, nil
}

func main() {
	level := flag.String("level", string(api.LevelRestricted), "policy level: baseline or restricted")
	var at versions
	flag.Var(&at, "version", "policy version, as in enforce-version (repeatable; default latest)")
	flag.Parse()
	parsedLevel, err := api.ParseLevel(*level)
	if err != nil {
		fmt.Fprintln(os.Stderr, "psscheck: -level:", err)
		os.Exit(2)
	}
	if len(at) == 0 {
		at = versions{api.LatestVersion()}
	}
	var manifests []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&manifests); err != nil {
		fmt.Fprintln(os.Stderr, "psscheck: input:", err)
		os.Exit(2)
	}
	out, err := judge(parsedLevel, at, manifests)
	if err != nil {
		fmt.Fprintln(os.Stderr, "psscheck:", err)
		os.Exit(2)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "psscheck:", err)
		os.Exit(2)
	}
}
