package operator

import (
	"bytes"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
)

// Every flag's environment variable is the one Settings names: setting it to
// another value than the default changes what the flag's injectable holds.
// This is what lets the reference and --help name variables by convention.
func TestEveryFlagIsSetByItsVariable(t *testing.T) {
	byFlag := map[string]coreoptions.Injectable{}
	for _, inj := range coreoptions.Injectables {
		fs := &coreoptions.FlagSet{FlagSet: flag.NewFlagSet("probe", flag.ContinueOnError)}
		fresh(inj).AddFlags(fs)
		fs.VisitAll(func(f *flag.Flag) { byFlag[f.Name] = inj })
	}
	build := func(inj coreoptions.Injectable) coreoptions.Injectable {
		o := fresh(inj)
		o.AddFlags(&coreoptions.FlagSet{FlagSet: flag.NewFlagSet("probe", flag.ContinueOnError)})
		return o
	}
	flags := 0
	for _, s := range Settings() {
		if s.Flag == "" {
			continue
		}
		flags++
		inj, ok := byFlag[s.Flag]
		if !ok {
			t.Fatalf("setting --%s belongs to no injectable", s.Flag)
		}
		t.Setenv(s.Env, "") // cleared below; Setenv restores it after the test
		unsetenv(t, s.Env)
		base := build(inj)
		other := map[string]string{"duration": "1234s", "int": "4321", "bool": "true", "string": "probe-value", "float": "1.5"}[s.Type]
		if s.Type == "bool" && s.Default == "true" {
			other = "false"
		}
		if other == "" {
			t.Fatalf("--%s: no probe value for type %q", s.Flag, s.Type)
		}
		t.Setenv(s.Env, other)
		if reflect.DeepEqual(base, build(inj)) {
			t.Errorf("--%s: %s=%s changes nothing: the variable is not %s", s.Flag, s.Env, other, s.Env)
		}
		unsetenv(t, s.Env)
	}
	if flags < 30 {
		t.Errorf("only %d flags found; the listing of Karpenter's and the provider's flags is broken", flags)
	}
}

func TestSettingsHoldNoCredentialFlag(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Settings() {
		if seen[s.Env] {
			t.Errorf("%s listed twice", s.Env)
		}
		seen[s.Env] = true
		if s.Secret && s.Flag != "" {
			t.Errorf("credential %s has a flag --%s: credentials come from the environment only", s.Env, s.Flag)
		}
		if strings.TrimSpace(s.Usage) == "" {
			t.Errorf("%s has no description", s.Env)
		}
	}
	for _, want := range []string{"SCW_SECRET_KEY", "AWS_SECRET_ACCESS_KEY"} {
		if !seen[want] {
			t.Errorf("%s is not listed", want)
		}
	}
}

func TestUsageNamesTheCommandAndEveryVariable(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	out := b.String()
	if !strings.HasPrefix(out, "Usage: karpenter-scaleway-em") || strings.Contains(out, "Usage of karpenter") {
		t.Errorf("usage does not start with the command's name:\n%.200s", out)
	}
	for _, s := range Settings() {
		if !strings.Contains(out, s.Env) {
			t.Errorf("usage does not mention %s", s.Env)
		}
	}
}

func unsetenv(t *testing.T, name string) {
	t.Helper()
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
