package operator

import (
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/envvar"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/imagesource"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/operator/options"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
)

// Groups of settings, in the order Usage prints them.
const (
	GroupProvider = "Provider"
	GroupCore     = "Karpenter core"
	GroupScaleway = "Scaleway API (environment only)"
	GroupBucket   = "Image bucket (environment only)"
)

// Setting is one flag or environment variable of the controller.
type Setting struct {
	Group string
	// Flag without dashes; "" for a variable that has no flag.
	Flag string
	Env  string
	// Type of the flag's value (string, int, duration, bool...); "" for a
	// variable without a flag.
	Type    string
	Default string
	Usage   string
	Secret  bool
}

// Settings lists every flag the controller accepts (Karpenter core's and the
// provider's, read from their AddFlags) with the environment variable that
// sets its default, then every variable read from the environment only.
// Defaults are what the current environment makes them: call it with a clean
// environment to document the built-in ones. For bool flags that Karpenter
// registers without a default value, it sets and restores the flag's
// variable to find the default: call it before anything else runs.
func Settings() []Setting {
	var out []Setting
	for _, group := range []string{GroupProvider, GroupCore} {
		for _, inj := range coreoptions.Injectables {
			if injectableGroup(inj) != group {
				continue
			}
			fs := &coreoptions.FlagSet{FlagSet: flag.NewFlagSet(Name, flag.ContinueOnError)}
			fresh(inj).AddFlags(fs)
			fs.VisitAll(func(f *flag.Flag) {
				s := Setting{Group: group, Flag: f.Name, Env: options.EnvName(f.Name), Default: f.DefValue, Usage: f.Usage}
				s.Type, _ = flag.UnquoteUsage(f)
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
					s.Type = "bool"
					if s.Default == "" {
						s.Default = boolDefault(inj, s.Env)
					}
				}
				out = append(out, s)
			})
		}
	}
	for _, g := range []struct {
		name string
		vars []envvar.Var
	}{{GroupScaleway, scaleway.EnvVars}, {GroupBucket, imagesource.EnvVars}} {
		for _, v := range g.vars {
			out = append(out, Setting{Group: g.name, Env: v.Name, Default: v.Default, Usage: v.Usage, Secret: v.Secret})
		}
	}
	return out
}

// Name is the controller's command name.
const Name = "karpenter-scaleway-em"

// Usage prints every setting (the --help output). Karpenter's own flag
// parsing would print them as "Usage of karpenter", without the provider's
// environment-only variables.
func Usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n", Name)
	fmt.Fprintln(w, "Karpenter core with the Scaleway Elastic Metal provider. Each flag's default comes from the")
	fmt.Fprintln(w, "environment variable shown beside it; credentials come from the environment only.")
	fmt.Fprintln(w, "Reference: docs/settings.md. Other commands: --version.")
	group := ""
	for _, s := range Settings() {
		if s.Group != group {
			group = s.Group
			fmt.Fprintf(w, "\n%s:\n", group)
		}
		var head []string
		if s.Flag != "" {
			fmt.Fprintf(w, "  --%s %s\n", s.Flag, s.Type)
			head = append(head, "env "+s.Env)
		} else {
			fmt.Fprintf(w, "  %s\n", s.Env)
		}
		if s.Default != "" {
			head = append(head, "default "+s.Default)
		}
		if s.Secret {
			head = append(head, "secret")
		}
		usage := s.Usage
		if len(head) > 0 {
			usage = "(" + strings.Join(head, ", ") + ") " + usage
		}
		fmt.Fprintf(w, "        %s\n", usage)
	}
}

func injectableGroup(inj coreoptions.Injectable) string {
	if strings.HasPrefix(reflect.TypeOf(inj).Elem().PkgPath(), "sigs.k8s.io/karpenter/") {
		return GroupCore
	}
	return GroupProvider
}

// fresh is a new zero value of inj's type, so listing the flags leaves the
// registered injectables alone.
func fresh(inj coreoptions.Injectable) coreoptions.Injectable {
	return reflect.New(reflect.TypeOf(inj).Elem()).Interface().(coreoptions.Injectable)
}

// boolDefault finds what a bool flag registered without a default value
// defaults to: the value its injectable holds when the flag's variable is
// unset equals the one it holds with the variable "true" or "false".
func boolDefault(inj coreoptions.Injectable, env string) string {
	saved, had := os.LookupEnv(env)
	defer func() {
		if had {
			os.Setenv(env, saved)
		} else {
			os.Unsetenv(env)
		}
	}()
	build := func() coreoptions.Injectable {
		o := fresh(inj)
		o.AddFlags(&coreoptions.FlagSet{FlagSet: flag.NewFlagSet(Name, flag.ContinueOnError)})
		return o
	}
	if had {
		return saved
	}
	base := build()
	os.Setenv(env, "true")
	withTrue := build()
	os.Setenv(env, "false")
	withFalse := build()
	switch {
	case reflect.DeepEqual(withTrue, withFalse):
		return "" // the variable does not set this flag
	case reflect.DeepEqual(base, withTrue):
		return "true"
	default:
		return "false"
	}
}
