package main

import (
	"reflect"
	"testing"
)

// TestHelpAlias: "help publish" asks publish for its flags; help for any
// other command stays with the rescue commands' own help.
func TestHelpAlias(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"help", "publish"}, []string{"publish", "-h"}},
		{[]string{"help", "schematic"}, []string{"schematic", "-h"}},
		{[]string{"help", "write"}, []string{"help", "write"}},
		{[]string{"presign"}, []string{"presign"}},
		{nil, nil},
	} {
		if got := helpAlias(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("helpAlias(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if firstArg(nil) != "" || firstArg([]string{"write"}) != "write" {
		t.Error("firstArg")
	}
}
