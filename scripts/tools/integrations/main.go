// Command kura-integrations evaluates the integration recipes of
// docs/integrations.md with the libraries the integrations themselves use,
// against real agent output (scripts/integrations-check.sh drives it):
//
//	kura-integrations argo-web --body FILE --jsonpath P [--success C] [--failure C]
//	    Argo Rollouts' web metric provider: the JSON body through
//	    k8s.io/client-go/util/jsonpath, the first value found as `result`,
//	    the conditions through github.com/expr-lang/expr, the measurement's
//	    phase printed (Successful, Failed, Inconclusive, Error), as Argo
//	    Rollouts' metricproviders/webmetric and utils/evaluate do.
//	kura-integrations argo-prometheus --values V1,V2,... [--success C] [--failure C]
//	    Argo Rollouts' Prometheus provider's result for an instant vector
//	    ([]float64 of the samples' values; an empty list for no sample).
//	kura-integrations kstatus FILE...
//	    kstatus (github.com/fluxcd/cli-utils, what Flux and helm --wait
//	    use): the status computed for each object (YAML or JSON) printed as
//	    "FILE STATUS: MESSAGE".
//	kura-integrations flux-cel --current E [--failed E] [--in-progress E] FILE...
//	    A Flux Kustomization's healthCheckExprs for the objects, as
//	    kustomize-controller evaluates them (fluxcd/pkg/runtime/cel, RFC
//	    0009): status.observedGeneration first, then inProgress, failed,
//	    current, else InProgress; the same CEL environment (cel-go, optional
//	    types, the strings, sets and encoders extensions), the object's
//	    top-level fields as the variables. Prints "FILE STATUS" (or
//	    "FILE Error: ..." when an expression cannot be evaluated).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "argo-web":
		err = argoWeb(os.Args[2:])
	case "argo-prometheus":
		err = argoPrometheus(os.Args[2:])
	case "kstatus":
		err = kstatus(os.Args[2:])
	case "flux-cel":
		err = fluxCEL(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kura-integrations:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kura-integrations argo-web|argo-prometheus|kstatus ...")
	os.Exit(2)
}

// phase is what Argo Rollouts' evaluate.EvaluateResult decides for one
// measurement.
func phase(result any, success, failure string) (string, error) {
	ok, fail := false, false
	var err error
	if success != "" {
		if ok, err = evalCondition(result, success); err != nil {
			return "Error", fmt.Errorf("successCondition: %w", err)
		}
	}
	if failure != "" {
		if fail, err = evalCondition(result, failure); err != nil {
			return "Error", fmt.Errorf("failureCondition: %w", err)
		}
	}
	switch {
	case success == "" && failure == "":
		return "Successful", nil
	case success != "" && failure == "":
		fail = !ok
	case success == "" && failure != "":
		ok = !fail
	}
	if fail {
		return "Failed", nil
	}
	if !ok {
		return "Inconclusive", nil
	}
	return "Successful", nil
}

// evalCondition is Argo Rollouts' evaluate.EvalCondition: `result` and the
// helper functions in the environment, a bool out.
func evalCondition(result any, condition string) (bool, error) {
	env := map[string]any{
		"result":  valueFromPointer(result),
		"asInt":   asInt,
		"asFloat": asFloat,
		"isNaN":   math.IsNaN,
		"isInf":   func(f float64) bool { return math.IsInf(f, 0) },
		"isNil":   func() bool { return isNil(result) },
		"default": func(d any) any {
			if isNil(result) {
				return d
			}
			return valueFromPointer(result)
		},
	}
	program, err := expr.Compile(condition, expr.Env(env))
	if err != nil {
		return false, err
	}
	out, err := expr.Run(program, env)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("expected bool, but got %T", out)
	}
	return b, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Ptr, reflect.Map, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

func valueFromPointer(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Ptr && !rv.IsNil() {
		return rv.Elem().Interface()
	}
	return v
}

func asInt(in any) int64 {
	switch i := in.(type) {
	case float64:
		return int64(i)
	case int64:
		return i
	case int:
		return int64(i)
	case string:
		n, err := strconv.ParseInt(i, 10, 64)
		if err != nil {
			panic(err)
		}
		return n
	}
	panic(fmt.Sprintf("asInt() not supported on %T", in))
}

func asFloat(in any) float64 {
	switch i := in.(type) {
	case float64:
		return i
	case int64:
		return float64(i)
	case int:
		return float64(i)
	case string:
		f, err := strconv.ParseFloat(i, 64)
		if err != nil {
			panic(err)
		}
		return f
	}
	panic(fmt.Sprintf("asFloat() not supported on %T", in))
}

func argoWeb(args []string) error {
	fs := flag.NewFlagSet("argo-web", flag.ExitOnError)
	body := fs.String("body", "", "file holding the response body")
	path := fs.String("jsonpath", "{$}", "the metric's jsonPath")
	success := fs.String("success", "", "successCondition")
	failure := fs.String("failure", "", "failureCondition")
	_ = fs.Parse(args)
	raw, err := os.ReadFile(*body)
	if err != nil {
		return err
	}
	// webmetric.parseResponse: JSON decoded into interface{}, the jsonPath
	// applied, the first value found is the result.
	var data any
	if err := json.Unmarshal(raw, &data); err != nil {
		return fmt.Errorf("the body is not JSON: %w", err)
	}
	parser := jsonpath.New("metrics")
	if err := parser.Parse(*path); err != nil {
		return err
	}
	found, err := parser.FindResults(data)
	if err != nil {
		return fmt.Errorf("could not find JSONPath in body: %w", err)
	}
	var value any
	have := false
	for _, results := range found {
		for _, r := range results {
			value, have = r.Interface(), true
			break
		}
		if have {
			break
		}
	}
	if !have {
		return errors.New("result of web metric produced no value")
	}
	p, err := phase(value, *success, *failure)
	if err != nil {
		fmt.Println("Error:", err)
		return nil
	}
	fmt.Println(p)
	return nil
}

func argoPrometheus(args []string) error {
	fs := flag.NewFlagSet("argo-prometheus", flag.ExitOnError)
	values := fs.String("values", "", "comma-separated sample values of the instant vector (empty: no sample)")
	success := fs.String("success", "", "successCondition")
	failure := fs.String("failure", "", "failureCondition")
	_ = fs.Parse(args)
	result := []float64{}
	for _, v := range strings.Split(*values, ",") {
		if strings.TrimSpace(v) == "" {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return err
		}
		result = append(result, f)
	}
	p, err := phase(result, *success, *failure)
	if err != nil {
		fmt.Println("Error:", err)
		return nil
	}
	fmt.Println(p)
	return nil
}

// readObject reads a YAML or JSON object as the API server's JSON would
// decode (integers as int64).
func readObject(f string) (*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	return obj, nil
}

func celProgram(expr string) (cel.Program, error) {
	env, err := cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Sets(),
		ext.Encoders(),
	)
	if err != nil {
		return nil, err
	}
	ast, issues := env.Parse(expr)
	if issues != nil && issues.Err() != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, issues.Err())
	}
	return env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(100))
}

func fluxCEL(args []string) error {
	fs := flag.NewFlagSet("flux-cel", flag.ExitOnError)
	current := fs.String("current", "", "the current expression (required)")
	failed := fs.String("failed", "", "the failed expression")
	inProgress := fs.String("in-progress", "", "the inProgress expression")
	_ = fs.Parse(args)
	if *current == "" {
		return errors.New("--current is required")
	}
	type rule struct {
		expr   string
		status string
	}
	var rules []struct {
		prog   cel.Program
		status string
	}
	for _, r := range []rule{{*inProgress, "InProgress"}, {*failed, "Failed"}, {*current, "Current"}} {
		if r.expr == "" {
			continue
		}
		prog, err := celProgram(r.expr)
		if err != nil {
			return err
		}
		rules = append(rules, struct {
			prog   cel.Program
			status string
		}{prog, r.status})
	}
	for _, f := range fs.Args() {
		obj, err := readObject(f)
		if err != nil {
			return err
		}
		fmt.Printf("%s %s\n", f, fluxStatus(obj, rules))
	}
	return nil
}

func fluxStatus(obj *unstructured.Unstructured, rules []struct {
	prog   cel.Program
	status string
}) string {
	data := obj.UnstructuredContent()
	if observed, ok, _ := unstructured.NestedInt64(data, "status", "observedGeneration"); ok {
		if generation, ok, _ := unstructured.NestedInt64(data, "metadata", "generation"); ok && observed != generation {
			return "InProgress"
		}
	}
	for _, r := range rules {
		val, _, err := r.prog.Eval(data)
		if err != nil {
			return "Error: " + err.Error()
		}
		b, ok := val.(types.Bool)
		if !ok {
			return "Error: not a boolean"
		}
		if bool(b) {
			return r.status
		}
	}
	return "InProgress"
}

func kstatus(files []string) error {
	for _, f := range files {
		obj, err := readObject(f)
		if err != nil {
			return err
		}
		res, err := status.Compute(obj)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		fmt.Printf("%s %s: %s\n", f, res.Status, res.Message)
	}
	return nil
}
