// Command celcheck evaluates readiness CEL queries the way provider-kubernetes
// does (cel-go, the observed object bound to `object`), so tests can check the
// queries the function puts on its Objects against real CEL.
//
// Input on stdin: a JSON list of {"query": string, "object": any}.
// Output on stdout: a JSON list of {"result": bool} or {"error": string}.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/cel-go/cel"
)

type check struct {
	Query  string          `json:"query"`
	Object json.RawMessage `json:"object"`
}

type outcome struct {
	Result *bool  `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// decode reads JSON as Kubernetes' unstructured decoding does: whole numbers
// become int64, others float64.
func decode(raw json.RawMessage) (any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = numbers(x)
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = numbers(x)
		}
		return t
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	default:
		return v
	}
}

func evaluate(env *cel.Env, c check) outcome {
	ast, issues := env.Compile(c.Query)
	if issues != nil && issues.Err() != nil {
		return outcome{Error: issues.Err().Error()}
	}
	prg, err := env.Program(ast)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	obj, err := decode(c.Object)
	if err != nil {
		return outcome{Error: err.Error()}
	}
	val, _, err := prg.Eval(map[string]any{"object": obj})
	if err != nil {
		return outcome{Error: err.Error()}
	}
	b, ok := val.Value().(bool)
	if !ok {
		return outcome{Error: fmt.Sprintf("query returned %T, not bool", val.Value())}
	}
	return outcome{Result: &b}
}

func main() {
	var checks []check
	if err := json.NewDecoder(os.Stdin).Decode(&checks); err != nil {
		fmt.Fprintln(os.Stderr, "cannot read checks:", err)
		os.Exit(2)
	}
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot build CEL environment:", err)
		os.Exit(2)
	}
	out := make([]outcome, 0, len(checks))
	for _, c := range checks {
		out = append(out, evaluate(env, c))
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "cannot write results:", err)
		os.Exit(2)
	}
}
