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
//	    A Flux Kustomization's healthCheckExprs for the objects, evaluated
//	    by fluxcd/pkg/runtime/cel's StatusEvaluator itself (what
//	    kustomize-controller runs, RFC 0009: status.observedGeneration
//	    first, then inProgress, failed, current, else InProgress). Prints
//	    "FILE STATUS" (or "FILE Error: ..." when an expression cannot be
//	    evaluated).
//	kura-integrations argocd-health DIR
//	    An Argo CD resource health check (DIR/health.lua) on its test cases
//	    (DIR/health_test.yaml, inputs under DIR) in Argo CD's own Lua VM:
//	    gopher-lua with only the package, base and table libraries opened,
//	    as util/lua's runLua does for an argocd-cm check (no string, math,
//	    os or io library), the object decoded as Argo CD decodes it, the
//	    returned table's status and message compared with healthStatus.
//	    Prints one line per case; exit 1 when any case differs.
//	kura-integrations argocd-eval DIR FILE...
//	    The same check (DIR/health.lua, the same VM) on any objects (YAML
//	    or JSON, e.g. as the API server returned them): prints
//	    "FILE STATUS: MESSAGE" per object.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/apis/kustomize"
	fluxcel "github.com/fluxcd/pkg/runtime/cel"
	lua "github.com/yuin/gopher-lua"
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
	case "argocd-health":
		err = argocdHealth(os.Args[2:])
	case "argocd-eval":
		err = argocdEval(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kura-integrations:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kura-integrations argo-web|argo-prometheus|kstatus|flux-cel|argocd-health|argocd-eval ...")
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

func fluxCEL(args []string) error {
	fs := flag.NewFlagSet("flux-cel", flag.ExitOnError)
	current := fs.String("current", "", "the current expression (required)")
	failed := fs.String("failed", "", "the failed expression")
	inProgress := fs.String("in-progress", "", "the inProgress expression")
	_ = fs.Parse(args)
	evaluator, err := fluxcel.NewStatusEvaluator(&kustomize.HealthCheckExpressions{
		Current:    *current,
		Failed:     *failed,
		InProgress: *inProgress,
	})
	if err != nil {
		return err
	}
	for _, f := range fs.Args() {
		obj, err := readObject(f)
		if err != nil {
			return err
		}
		res, err := evaluator.Evaluate(context.Background(), obj)
		if err != nil {
			fmt.Printf("%s Error: %s\n", f, err)
			continue
		}
		fmt.Printf("%s %s\n", f, res.Status)
	}
	return nil
}

// healthTests is Argo CD's health_test.yaml.
type healthTests struct {
	Tests []struct {
		HealthStatus struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"healthStatus"`
		InputPath string `json:"inputPath"`
	} `json:"tests"`
}

func argocdHealth(args []string) error {
	if len(args) != 1 {
		return errors.New("argocd-health DIR")
	}
	dir := args[0]
	script, err := os.ReadFile(filepath.Join(dir, "health.lua"))
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
	if err != nil {
		return err
	}
	var tests healthTests
	if err := yaml.UnmarshalStrict(raw, &tests); err != nil {
		return fmt.Errorf("health_test.yaml: %w", err)
	}
	if len(tests.Tests) == 0 {
		return errors.New("health_test.yaml has no tests")
	}
	bad := 0
	for _, t := range tests.Tests {
		obj, err := readObject(filepath.Join(dir, t.InputPath))
		if err != nil {
			return err
		}
		st, msg, err := runHealthLua(obj, string(script))
		switch {
		case err != nil:
			bad++
			fmt.Printf("FAIL %s: %v\n", t.InputPath, err)
		case st != t.HealthStatus.Status || msg != t.HealthStatus.Message:
			bad++
			fmt.Printf("FAIL %s: %s %q, want %s %q\n", t.InputPath, st, msg, t.HealthStatus.Status, t.HealthStatus.Message)
		default:
			fmt.Printf("ok   %s: %s %q\n", t.InputPath, st, msg)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d health check cases failed", bad, len(tests.Tests))
	}
	return nil
}

func argocdEval(args []string) error {
	if len(args) < 2 {
		return errors.New("argocd-eval DIR FILE...")
	}
	script, err := os.ReadFile(filepath.Join(args[0], "health.lua"))
	if err != nil {
		return err
	}
	for _, f := range args[1:] {
		obj, err := readObject(f)
		if err != nil {
			return err
		}
		st, msg, err := runHealthLua(obj, string(script))
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		fmt.Printf("%s %s: %s\n", f, st, msg)
	}
	return nil
}

// runHealthLua is Argo CD's util/lua VM.runLua + ExecuteHealthLua for an
// argocd-cm health check (useOpenLibs false): SkipOpenLibs, then only the
// package, base and table libraries, a 1 s deadline, `obj` as a global.
// (Argo CD also opens a reduced os library; a check that needs it is not
// portable, so it is left out here.)
func runHealthLua(obj *unstructured.Unstructured, script string) (string, string, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return "", "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeLua(l, obj.Object))
	if err := l.DoString(script); err != nil {
		return "", "", err
	}
	ret := l.Get(-1)
	table, ok := ret.(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("expect table output from Lua script, not %s", ret.Type())
	}
	st, msg := table.RawGetString("status"), table.RawGetString("message")
	switch st.String() {
	case "Unknown", "Progressing", "Suspended", "Healthy", "Degraded", "Missing":
	default:
		return "Unknown", "Lua returned an invalid health status", nil
	}
	if msg == lua.LNil {
		return st.String(), "", nil
	}
	if msg.Type() != lua.LTString {
		return "", "", fmt.Errorf("message is a %s, not a string", msg.Type())
	}
	return st.String(), msg.String(), nil
}

// decodeLua is Argo CD's util/lua decodeValue: JSON values as Lua values
// (integers, as the API server's JSON decodes them, as numbers).
func decodeLua(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeLua(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeLua(l, item))
		}
		return tbl
	}
	return lua.LNil
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
